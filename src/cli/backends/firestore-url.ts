/**
 * How the CLI names a Firestore database: `firestore://PROJECT_ID` (the
 * `(default)` database) or `firestore://PROJECT_ID/DATABASE_ID`, in
 * --database-url, TXBOX_DATABASE_URL or the config file. No credentials go
 * in the URL: they come from Application Default Credentials, or none on the
 * emulator (FIRESTORE_EMULATOR_HOST). Loads no Firestore package.
 */
import { ConfigError } from '../../core/errors.ts';
import { firestoreNames, type FirestoreNames } from '../../stores/firestore/firestore-names.ts';
import { CliError } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';

export interface FirestoreLocation {
  readonly projectId: string;
  readonly databaseId: string;
  /** FIRESTORE_EMULATOR_HOST when set (the client then talks to the emulator). */
  readonly emulator: string | undefined;
  /** Where the URL came from (--database-url, TXBOX_DATABASE_URL, ...), for messages. */
  readonly source: string;
  /** `project P, database D` (and `on the emulator at H`), for messages. */
  readonly label: string;
}

/** Google's rules: project ids 6-30 lowercase letters, digits and hyphens (older ones are shorter), database ids up to 63. */
const PROJECT = /^[a-z][a-z0-9-]{0,62}$/;
const DATABASE = /^[a-z][a-z0-9-]{0,62}$/;
const FORM = 'firestore://PROJECT_ID or firestore://PROJECT_ID/DATABASE_ID';

/** Parses a firestore:// URL, naming `source` and the right form in every error. */
export function parseFirestoreUrl(url: string, source: string, env: NodeJS.ProcessEnv = process.env): FirestoreLocation {
  let parsed: URL;
  try {
    parsed = new URL(url.trim());
  } catch {
    throw new CliError(`${source}: not a URL; give ${FORM}, e.g. firestore://my-project`);
  }
  if (parsed.protocol.toLowerCase() !== 'firestore:') throw new CliError(`${source}: not a firestore:// URL; give ${FORM}`);
  if (parsed.username || parsed.password) {
    throw new CliError(`${source}: a firestore:// URL carries no credentials; they come from GOOGLE_APPLICATION_CREDENTIALS or \`gcloud auth application-default login\``);
  }
  if (parsed.port || parsed.search || parsed.hash) throw new CliError(`${source}: a firestore:// URL has no port, query or fragment; give ${FORM} (the emulator's address goes in FIRESTORE_EMULATOR_HOST)`);
  const projectId = parsed.hostname;
  if (projectId === '') throw new CliError(`${source}: names no project; give ${FORM}, e.g. firestore://my-project`);
  if (!PROJECT.test(projectId)) throw new CliError(`${source}: ${JSON.stringify(projectId)} is not a project id (lowercase letters, digits and hyphens, starting with a letter)`);
  const rawPath = parsed.pathname.replace(/^\//, '').replace(/\/$/, '');
  let path: string;
  try {
    path = decodeURIComponent(rawPath);
  } catch {
    path = rawPath; // a malformed escape (%zz): refused below as not a database id
  }
  const databaseId = path === '' ? '(default)' : path;
  if (databaseId !== '(default)' && !DATABASE.test(databaseId)) {
    throw new CliError(`${source}: ${JSON.stringify(databaseId)} is not a database id (lowercase letters, digits and hyphens, starting with a letter; or (default)); give ${FORM}`);
  }
  const emulator = env.FIRESTORE_EMULATOR_HOST || undefined;
  const label = `project ${projectId}, database ${databaseId}${emulator !== undefined ? ` on the emulator at ${emulator}` : ''}`;
  return { projectId, databaseId, emulator, source, label };
}

/** The configured Firestore database (the database URL must be a firestore:// one). */
export function firestoreLocation(config: CliConfig): FirestoreLocation {
  return parseFirestoreUrl(config.databaseUrl!, config.sources.databaseUrl ?? 'the database URL');
}

/** The outbox collection: --table when set anywhere, else Firestore's default `txbox_outbox` (not the SQL default `outbox`). */
export function firestoreCollection(config: CliConfig): string {
  return config.sources.table !== undefined ? config.table : 'txbox_outbox';
}

/** The validated collection names, a ConfigError turned into a message naming --table (or where the name was set). */
export function firestoreCliNames(config: CliConfig): FirestoreNames {
  try {
    return firestoreNames({ collection: firestoreCollection(config) });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`${config.sources.table ?? '--table'}: ${err.message.replace(/^collection: /, '')}`);
    throw err;
  }
}
