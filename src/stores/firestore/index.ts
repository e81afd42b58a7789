/**
 * Google Cloud Firestore backend (`@google-cloud/firestore`), `txbox/firestore`:
 * outbox store, relay store, status and parked/replay admin, the composite
 * indexes the queries need, the inbox with its admin, and version-guarded
 * projections (docs/stores/firestore.md).
 */
export { FirestoreOutboxStore, type FirestoreOutboxStoreOptions, type FirestoreTx } from './firestore-outbox-store.ts';
export { FirestoreRelayStore, type FirestoreRelayStoreOptions } from './firestore-relay-store.ts';
export { FirestoreAdmin, type FirestoreParkedEvent, type FirestoreParkedSelector, type FirestoreReplayFilter } from './firestore-admin.ts';
export { type FirestoreOutboxStatus, type FirestoreDestinationStatus, type FirestoreRelayStatus } from './firestore-status.ts';
export { firestoreIndexes, firestoreInboxIndexes, gcloudIndexCommands, type FirestoreIndexes, type FirestoreIndex, type FirestoreFieldOverride } from './firestore-indexes.ts';
export { FirestoreInboxStore, envelopeFromFirestore, type FirestoreInboxStoreOptions } from './firestore-inbox-store.ts';
export { FirestoreInboxAdmin, type DeadEvent, type HeldEvent, type InboxConsumerStatus } from './firestore-inbox-admin.ts';
export { applyVersioned, type FirestoreVersionedWrite, type VersionedResult } from './firestore-projection.ts';
export { firestoreNames, firestoreInboxNames, bucketOf, type FirestoreNames, type FirestoreNamesOptions, type FirestoreInboxNames, type FirestoreInboxNamesOptions } from './firestore-names.ts';
