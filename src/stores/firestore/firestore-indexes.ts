/**
 * The composite indexes a Firestore outbox's queries need. Firestore builds
 * single-field indexes by itself but composite ones only when they are
 * deployed (the emulator needs none): `firestoreIndexes` is the
 * `firestore.indexes.json` content (`firebase deploy --only firestore:indexes`),
 * `gcloudIndexCommands` the same as gcloud commands.
 */
import { firestoreNames, type FirestoreNamesOptions } from './firestore-names.ts';

type Order = 'ASCENDING' | 'DESCENDING';

export interface FirestoreIndex {
  readonly collectionGroup: string;
  readonly queryScope: 'COLLECTION';
  readonly fields: readonly { readonly fieldPath: string; readonly order: Order }[];
}

export interface FirestoreFieldOverride {
  readonly collectionGroup: string;
  readonly fieldPath: string;
  /** Empty: the field is not indexed at all. */
  readonly indexes: readonly never[];
}

/** The content of `firestore.indexes.json`. */
export interface FirestoreIndexes {
  readonly indexes: readonly FirestoreIndex[];
  readonly fieldOverrides: readonly FirestoreFieldOverride[];
}

/** The outbox's composite indexes, each with the queries it serves (docs/stores/firestore.md#indexes). */
const OUTBOX_INDEXES: readonly { readonly fields: readonly (readonly [string, Order])[]; readonly serves: string }[] = [
  { fields: [['state', 'ASCENDING'], ['bucket', 'ASCENDING'], ['ts', 'ASCENDING']], serves: 'claims by group of buckets' },
  { fields: [['state', 'ASCENDING'], ['ts', 'ASCENDING']], serves: 'claims over all buckets' },
  { fields: [['state', 'ASCENDING'], ['ts', 'DESCENDING']], serves: 'the wake-up listener' },
  { fields: [['state', 'ASCENDING'], ['doneAt', 'ASCENDING']], serves: 'retention; status (published last minute)' },
  { fields: [['state', 'ASCENDING'], ['key', 'ASCENDING']], serves: 'the parked events of the claimed keys; status (behind parked)' },
  { fields: [['state', 'ASCENDING'], ['destination', 'ASCENDING']], serves: 'status and metrics: the destinations with open events' },
  { fields: [['state', 'ASCENDING'], ['destination', 'ASCENDING'], ['ts', 'ASCENDING']], serves: 'status and metrics: the oldest pending event per destination' },
  { fields: [['state', 'ASCENDING'], ['destination', 'ASCENDING'], ['nextAttemptAt', 'ASCENDING']], serves: 'status: events backing off per destination' },
];

/** What each composite index serves, in the order of `firestoreIndexes().indexes`. */
export const INDEX_PURPOSES: readonly string[] = OUTBOX_INDEXES.map((i) => i.serves);

/** `firestore.indexes.json` for the outbox named by `options.collection`; `payload` and `headers` are exempt from indexing (no query reads them). */
export function firestoreIndexes(options: FirestoreNamesOptions = {}): FirestoreIndexes {
  const { outbox } = firestoreNames(options);
  return {
    indexes: OUTBOX_INDEXES.map((i) => ({ collectionGroup: outbox, queryScope: 'COLLECTION', fields: i.fields.map(([fieldPath, order]) => ({ fieldPath, order })) })),
    fieldOverrides: ['payload', 'headers'].map((fieldPath) => ({ collectionGroup: outbox, fieldPath, indexes: [] })),
  };
}

/**
 * The same indexes as `gcloud firestore indexes composite create` commands
 * (one a line), for `project` and `database`. gcloud has no command for the
 * field exemptions: deploy `firestoreIndexes()` with firebase for those.
 */
export function gcloudIndexCommands(project: string, database: string, options: FirestoreNamesOptions = {}): string[] {
  return firestoreIndexes(options).indexes.map(
    (i) =>
      `gcloud firestore indexes composite create --project=${project} --database=${database === '(default)' ? "'(default)'" : database} --collection-group=${i.collectionGroup} --query-scope=collection ` +
      i.fields.map((f) => `--field-config=field-path=${f.fieldPath},order=${f.order.toLowerCase()}`).join(' '),
  );
}
