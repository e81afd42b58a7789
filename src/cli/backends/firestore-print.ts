/** `txbox migrate --print` and `txbox inbox migrate --print` on a firestore:// URL: the firestore.indexes.json content (no connection, no Firestore package). */
import { ConfigError } from '../../core/errors.ts';
import { firestoreInboxIndexes, firestoreIndexes } from '../../stores/firestore/firestore-indexes.ts';
import { CliError, configMessage } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';
import { firestoreCliNames } from './firestore-url.ts';

export function printFirestore(config: CliConfig): string {
  return JSON.stringify(firestoreIndexes({ collection: firestoreCliNames(config).collection }), null, 2);
}

/** The inbox collection's indexes (`--inbox-table`, default `txbox_inbox`); `txbox inbox` runs nothing else on Firestore yet. */
export function printFirestoreInbox(collection: string | undefined): string {
  try {
    return JSON.stringify(firestoreInboxIndexes(collection === undefined ? {} : { collection }), null, 2);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, { collection: '--inbox-table' }));
    throw err;
  }
}
