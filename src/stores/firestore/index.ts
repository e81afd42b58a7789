/**
 * Google Cloud Firestore backend (`@google-cloud/firestore`), `txbox/firestore`:
 * outbox store, relay store, status and parked/replay admin, and the
 * composite indexes the queries need (docs/stores/firestore.md).
 */
export { FirestoreOutboxStore, type FirestoreOutboxStoreOptions, type FirestoreTx } from './firestore-outbox-store.ts';
export { FirestoreRelayStore, type FirestoreRelayStoreOptions } from './firestore-relay-store.ts';
export { FirestoreAdmin, type FirestoreParkedEvent, type FirestoreParkedSelector, type FirestoreReplayFilter } from './firestore-admin.ts';
export { type FirestoreOutboxStatus, type FirestoreDestinationStatus, type FirestoreRelayStatus } from './firestore-status.ts';
export { firestoreIndexes, gcloudIndexCommands, type FirestoreIndexes, type FirestoreIndex, type FirestoreFieldOverride } from './firestore-indexes.ts';
export { firestoreNames, bucketOf, type FirestoreNames, type FirestoreNamesOptions } from './firestore-names.ts';
