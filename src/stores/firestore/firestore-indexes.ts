/**
 * The composite indexes a Firestore outbox's queries need. Firestore builds
 * single-field indexes by itself but composite ones only when they are
 * deployed (the emulator needs none): `firestoreIndexes` is the
 * `firestore.indexes.json` content (`firebase deploy --only firestore:indexes`),
 * `gcloudIndexCommands` the same as gcloud commands.
 */
import { firestoreInboxNames, firestoreNames, type FirestoreInboxNamesOptions, type FirestoreNamesOptions } from './firestore-names.ts';

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
/** A composite index: its fields in order, and what it serves. */
type IndexDefinition = { readonly fields: readonly (readonly [string, Order])[]; readonly serves: string };

const OUTBOX_INDEXES: readonly IndexDefinition[] = [
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

/**
 * The inbox's composite indexes (FirestoreInboxStore, FirestoreInboxAdmin). Its
 * other queries filter by equality only, which Firestore serves by merging
 * single-field indexes. Processing an event reads and writes documents
 * by id and needs none of these: without them, the redrive, the held events and
 * the admin fail (FAILED_PRECONDITION) while events are still processed.
 */
const INBOX_INDEXES: readonly IndexDefinition[] = [
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['receivedAt', 'ASCENDING']], serves: "operator retries (redrive); listDead and listHeld of a consumer" },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['type', 'ASCENDING'], ['receivedAt', 'ASCENDING']], serves: 'operator retries of the types the process handles' },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['key', 'ASCENDING']], serves: 'the held events of a batch\'s keys' },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['key', 'ASCENDING'], ['version', 'ASCENDING'], ['receivedAt', 'ASCENDING']], serves: 'the held events of a key, in version order' },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['heldAt', 'ASCENDING']], serves: 'the held re-check (keys nobody looked at)' },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['processedAt', 'ASCENDING']], serves: 'status: processed in the last minute' },
  { fields: [['consumer', 'ASCENDING'], ['status', 'ASCENDING'], ['processedAt', 'DESCENDING']], serves: 'status: the last processing time' },
  { fields: [['status', 'ASCENDING'], ['receivedAt', 'ASCENDING']], serves: 'listDead and listHeld of every consumer' },
  { fields: [['status', 'ASCENDING'], ['processedAt', 'ASCENDING']], serves: 'prune (processed documents by age)' },
];

/** What each composite index of the inbox serves, in the order of `firestoreInboxIndexes().indexes`. */
export const INBOX_INDEX_PURPOSES: readonly string[] = INBOX_INDEXES.map((i) => i.serves);

/** `firestore.indexes.json` for the outbox named by `options.collection`; `payload` and `headers` are exempt from indexing (no query reads them). */
export function firestoreIndexes(options: FirestoreNamesOptions = {}): FirestoreIndexes {
  const { outbox } = firestoreNames(options);
  return {
    indexes: composite(outbox, OUTBOX_INDEXES),
    fieldOverrides: ['payload', 'headers'].map((fieldPath) => ({ collectionGroup: outbox, fieldPath, indexes: [] })),
  };
}

/** The definitions as `firestore.indexes.json` entries of `collectionGroup`. */
function composite(collectionGroup: string, definitions: readonly IndexDefinition[]): FirestoreIndex[] {
  return definitions.map((i) => ({ collectionGroup, queryScope: 'COLLECTION', fields: i.fields.map(([fieldPath, order]) => ({ fieldPath, order })) }));
}

/**
 * `firestore.indexes.json` for the inbox collection named by `options.collection`
 * (default `txbox_inbox`); `envelope` is exempt from indexing (no query reads it).
 * Merge its two lists into the outbox's file when both live in one database.
 */
export function firestoreInboxIndexes(options: FirestoreInboxNamesOptions = {}): FirestoreIndexes {
  const { inbox } = firestoreInboxNames(options);
  return {
    indexes: composite(inbox, INBOX_INDEXES),
    fieldOverrides: [{ collectionGroup: inbox, fieldPath: 'envelope', indexes: [] }],
  };
}

/**
 * The same indexes as `gcloud firestore indexes composite create` commands
 * (one a line), for `project` and `database`. gcloud has no command for the
 * field exemptions: deploy `firestoreIndexes()` with firebase for those.
 * `file`: the indexes to create (default: the outbox's, `firestoreIndexes(options)`).
 */
export function gcloudIndexCommands(project: string, database: string, options: FirestoreNamesOptions = {}, file: FirestoreIndexes = firestoreIndexes(options)): string[] {
  return file.indexes.map(
    (i) =>
      `gcloud firestore indexes composite create --project=${project} --database=${database === '(default)' ? "'(default)'" : database} --collection-group=${i.collectionGroup} --query-scope=collection ` +
      i.fields.map((f) => `--field-config=field-path=${f.fieldPath},order=${f.order.toLowerCase()}`).join(' '),
  );
}
