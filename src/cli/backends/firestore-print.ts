/** `txbox migrate --print` on a firestore:// URL: the firestore.indexes.json content (no connection, no Firestore package). */
import { firestoreIndexes } from '../../stores/firestore/firestore-indexes.ts';
import type { CliConfig } from '../config.ts';
import { firestoreCliNames } from './firestore-url.ts';

export function printFirestore(config: CliConfig): string {
  return JSON.stringify(firestoreIndexes({ collection: firestoreCliNames(config).collection }), null, 2);
}
