/**
 * The CLI's Firestore backend (firestore://PROJECT_ID[/DATABASE_ID] URLs):
 * the outbox is the collection `--table` names (default `txbox_outbox`; the
 * buckets, relays and audit collections take it as a prefix), in the project
 * and database the URL names. Credentials come the Google way (Application
 * Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's login, the
 * metadata server); FIRESTORE_EMULATOR_HOST points the client at the
 * emulator. There are no tables: `migrate` creates the bucket documents and
 * says which composite indexes to deploy. Relays wake by a snapshot listener
 * and polling; there are no circuits, WAL slots or schemas.
 */
import { Firestore } from '@google-cloud/firestore';
import { FirestoreAdmin } from '../../stores/firestore/firestore-admin.ts';
import type { FirestoreNames } from '../../stores/firestore/firestore-names.ts';
import { FirestoreRelayStore } from '../../stores/firestore/firestore-relay-store.ts';
import { CliError, EXIT } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';
import { firestoreCliNames, firestoreLocation, type FirestoreLocation } from './firestore-url.ts';
import type { CliAdmin, CliBackend } from './backend.ts';

/** How long the first read may take before the CLI says Firestore cannot be reached (the client itself retries for minutes). */
export const FIRESTORE_CONNECT_TIMEOUT_MS = 10_000;

/** A Firestore client for the URL's project and database (on the emulator when FIRESTORE_EMULATOR_HOST is set). */
export function firestoreClient(where: FirestoreLocation): Firestore {
  // On the emulator there is no metadata server to look for credentials on (the client warns on every run otherwise).
  if (where.emulator !== undefined) process.env.METADATA_SERVER_DETECTION ??= 'none';
  return new Firestore({ projectId: where.projectId, databaseId: where.databaseId });
}

/** A client for `where` whose first read answered (a CliError with exit code 3 and the cause otherwise, the client ended). */
export async function connectFirestore(where: FirestoreLocation, n: FirestoreNames): Promise<Firestore> {
  const firestore = firestoreClient(where);
  try {
    await checkAccess(firestore, n, where);
  } catch (err) {
    await firestore.terminate().catch(() => {});
    throw err;
  }
  return firestore;
}

export async function openFirestoreBackend(config: CliConfig): Promise<CliBackend> {
  const where = firestoreLocation(config);
  const n = firestoreCliNames(config);
  const firestore = await connectFirestore(where, n);
  const admin = new FirestoreAdmin(firestore, { collection: n.collection });
  return {
    store: 'firestore',
    outbox: `${n.outbox} (${where.label})`,
    postgres: undefined,
    firestore: { ...where, names: n },
    migrate: async () => {
      const created = await admin.prepare();
      return created > 0 ? [`${created} bucket documents`] : [];
    },
    relayStore: () => new FirestoreRelayStore({ firestore, collection: n.collection, wake: 'listen' }),
    status: async () => ({ store: 'firestore', status: await admin.status() }),
    admin: (): CliAdmin => admin,
    // Retention as the relay runs it (published and skipped events by doneAt, never pending or parked ones), `batchSize` per call.
    async prune(olderThanMs, batchSize, onProgress) {
      const store = new FirestoreRelayStore({ firestore, collection: n.collection, wake: 'poll' });
      let deleted = 0;
      for (;;) {
        const count = await store.prune(olderThanMs, batchSize);
        deleted += count;
        if (count > 0) onProgress(deleted);
        if (count < batchSize) return deleted;
      }
    },
    close: () => firestore.terminate(),
  };
}

/**
 * One read of a bucket document, bounded: it fails on no access, no
 * credentials, no database, or no answer. The client leaves promises of its
 * own unhandled when it finds no credentials, and its retries of an
 * unanswered read reject once it is terminated: those two errors are
 * absorbed while the check runs and, when it failed, until the command exits
 * (it then ends the client and says what went wrong); any other unhandled
 * rejection still ends the process as usual.
 */
async function checkAccess(firestore: Firestore, n: FirestoreNames, where: FirestoreLocation): Promise<void> {
  const absorb = (reason: unknown): void => {
    if (!/Could not load the default credentials|client has already been terminated/.test((reason as Error)?.message ?? '')) throw reason;
  };
  process.on('unhandledRejection', absorb);
  const read = firestore.collection(n.buckets).limit(1).get();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new FirestoreTimeout()), FIRESTORE_CONNECT_TIMEOUT_MS);
  });
  try {
    await Promise.race([read, timeout]);
    process.off('unhandledRejection', absorb);
  } catch (err) {
    read.catch(() => {}); // the client ends below; its read then fails too
    throw new CliError(`${firestoreProblem(err, where)} (from ${where.source})`, EXIT.database);
  } finally {
    clearTimeout(timer);
  }
}

class FirestoreTimeout extends Error {}

/**
 * What went wrong on the first read, in the user's terms: no answer, no
 * credentials, credentials refused or without access, no such database.
 * gRPC status codes: 5 NOT_FOUND, 7 PERMISSION_DENIED, 16 UNAUTHENTICATED.
 */
export function firestoreProblem(err: unknown, where: FirestoreLocation): string {
  if (err instanceof FirestoreTimeout) {
    return where.emulator !== undefined
      ? `cannot reach the Firestore emulator at ${where.emulator} (FIRESTORE_EMULATOR_HOST): no answer within ${FIRESTORE_CONNECT_TIMEOUT_MS / 1000} s; start it (scripts/firestore/up.sh) or fix FIRESTORE_EMULATOR_HOST`
      : `cannot reach Firestore for ${where.label}: no answer within ${FIRESTORE_CONNECT_TIMEOUT_MS / 1000} s; check the network (firestore.googleapis.com:443), or set FIRESTORE_EMULATOR_HOST to use the emulator`;
  }
  const code = (err as { code?: unknown }).code;
  const message = (err as Error).message ?? String(err);
  if (/default credentials/i.test(message)) {
    return `no Google credentials for ${where.label}: set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run \`gcloud auth application-default login\`, or set FIRESTORE_EMULATOR_HOST to use the emulator`;
  }
  if (code === 16) return `Firestore rejected the credentials for ${where.label}: check GOOGLE_APPLICATION_CREDENTIALS (or \`gcloud auth application-default login\`): ${message}`;
  if (code === 7) return `Firestore refused access to ${where.label}: grant the credentials' account the Cloud Datastore User role (roles/datastore.user) on project ${where.projectId}, or fix the project in the URL: ${message}`;
  if (code === 5) return `${where.label} has no Firestore database: create it (gcloud firestore databases create --database=${where.databaseId}) or fix the URL (firestore://PROJECT_ID/DATABASE_ID): ${message}`;
  return `Firestore failed for ${where.label}: ${message}`;
}
