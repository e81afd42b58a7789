/**
 * Google Cloud Firestore backend (`@google-cloud/firestore`): outbox store,
 * relay store and parked/replay admin. The inbox, projections and the CLI
 * are not there yet (docs/stores/firestore.md).
 */
export { FirestoreOutboxStore, type FirestoreOutboxStoreOptions, type FirestoreTx } from './firestore-outbox-store.ts';
export { FirestoreRelayStore, type FirestoreRelayStoreOptions } from './firestore-relay-store.ts';
export { FirestoreAdmin, type FirestoreParkedEvent, type FirestoreParkedSelector, type FirestoreReplayFilter } from './firestore-admin.ts';
export { firestoreNames, bucketOf, type FirestoreNames, type FirestoreNamesOptions } from './firestore-names.ts';
