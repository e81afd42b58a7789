/**
 * Google's Firestore emulator for tests: `scripts/firestore/up.sh` starts it
 * on 127.0.0.1:8086 (FIRESTORE_EMULATOR_HOST overrides). Tests skip with a
 * clear message when the emulator is not installed; each test file uses a
 * project id of its own, so files never see each other's documents, and
 * clears it at the end.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { Firestore, type QueryDocumentSnapshot, type Transaction, type WriteBatch } from '@google-cloud/firestore';
import type { StoreConformanceNamespace } from 'txbox/testing/conformance';
import { applyVersioned, FirestoreAdmin, FirestoreInboxAdmin, FirestoreInboxStore, FirestoreOutboxStore, FirestoreRelayStore, type FirestoreTx } from '../../src/stores/firestore/index.ts';

export const FIRESTORE_EMULATOR_BIN = '/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud_firestore_emulator';
export const FIRESTORE_HOST = process.env.FIRESTORE_EMULATOR_HOST ?? '127.0.0.1:8086';

/** A reason to skip, or false when the emulator answers (started by scripts/firestore/up.sh if needed). */
export async function firestoreSkip(): Promise<string | false> {
  if (process.env.FIRESTORE_EMULATOR_HOST === undefined && !existsSync(FIRESTORE_EMULATOR_BIN)) {
    return `the Firestore emulator is not installed (${FIRESTORE_EMULATOR_BIN}; package google-cloud-cli-firestore-emulator)`;
  }
  if (process.env.FIRESTORE_EMULATOR_HOST === undefined) {
    await promisify(execFile)('bash', [new URL('../../scripts/firestore/up.sh', import.meta.url).pathname], { timeout: 120_000 });
  }
  return false;
}

/** A Firestore client on the emulator, in a project of its own (`txbox-<name>-<random>`). */
export function emulatorFirestore(name: string): Firestore {
  process.env.FIRESTORE_EMULATOR_HOST ??= FIRESTORE_HOST;
  process.env.METADATA_SERVER_DETECTION ??= 'none'; // no probe of the GCE metadata server (a warning on every run)
  const projectId = `txbox-${name}-${randomBytes(4).toString('hex')}`;
  const db = new Firestore({ projectId });
  projects.set(db, projectId);
  return db;
}

const projects = new WeakMap<Firestore, string>();

/** Ends the client, then deletes every document of its project in the emulator. */
export async function dropFirestore(db: Firestore): Promise<void> {
  await db.terminate();
  const res = await fetch(`http://${FIRESTORE_HOST}/emulator/v1/projects/${projects.get(db)}/databases/(default)/documents`, { method: 'DELETE' });
  await res.arrayBuffer();
}

/** Outbox order: commit time, then the UUIDv7 document id (as the store orders). */
function byPosition(a: QueryDocumentSnapshot, b: QueryDocumentSnapshot): number {
  const [x, y] = [a.get('ts'), b.get('ts')];
  return x.seconds - y.seconds || x.nanoseconds - y.nanoseconds || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * The store conformance suite's namespace: a project of its own on the
 * emulator, an `effects` collection for the business writes, a `stock_view`
 * collection for the projection, the inbox and its admin.
 */
export async function openFirestoreNamespace(name: string): Promise<StoreConformanceNamespace<FirestoreTx>> {
  const db = emulatorFirestore(name);
  const admin = new FirestoreAdmin(db);
  const effects = db.collection('effects');
  const stockView = db.collection('stock_view');
  const inboxAdmin = new FirestoreInboxAdmin(db);
  const open: (() => void)[] = [];
  return {
    outboxStore: new FirestoreOutboxStore({ firestore: db }),
    relayStore: () => new FirestoreRelayStore({ firestore: db }),
    // The inbox's Tx is a Transaction, one of the outbox's FirestoreTx: the suite's handlers write through it.
    inboxStore: new FirestoreInboxStore({ firestore: db }) as unknown as NonNullable<StoreConformanceNamespace<FirestoreTx>['inboxStore']>,
    transaction: (fn) => db.runTransaction(fn, { maxAttempts: 1 }),
    noCommitOrderGap: 'Firestore orders events by their transaction\'s commit time (a server timestamp): an event cannot commit later with an earlier position, so there is no gap to cross',
    async rows() {
      const docs = (await db.collection('txbox_outbox').get()).docs.sort(byPosition);
      return docs.map((d) => ({ id: d.get('id'), key: d.get('key'), state: d.get('state'), attempts: Number(d.get('attempts')), lastError: d.get('lastError') ?? null }));
    },
    retryParked: (ids) => admin.retryParked(ids, 'conformance'),
    skipParked: (ids) => admin.skipParked(ids, 'conformance'),
    replay: async (destination) => (await admin.replay({ destination }, 'conformance')).copied,
    async recordEffect(tx, note) {
      (tx as WriteBatch).set(effects.doc(), { note });
    },
    async countEffects(note) {
      return (await effects.where('note', '==', note).count().get()).data().count;
    },
    async applyVersioned(tx, row) {
      const r = await applyVersioned(tx as Transaction, { document: stockView.doc(row.id), version: row.version, values: { quantity: row.quantity }, onGap: row.onGap });
      return r.status === 'gap' ? { status: 'gap', missing: r.missing } : { status: r.status };
    },
    async readProjection(id) {
      const snap = await stockView.doc(id).get();
      return snap.exists ? { quantity: Number(snap.get('quantity')), version: Number(snap.get('version')) } : null;
    },
    listDead: async (consumer) => (await inboxAdmin.listDead({ consumer })).map((d) => d.id),
    retryDead: (consumer) => inboxAdmin.retryDead({ all: true, consumer }, 'conformance'),
    async close() {
      for (const end of open) end();
      await dropFirestore(db);
    },
  };
}
