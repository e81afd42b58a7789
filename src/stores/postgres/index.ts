/** PostgreSQL backend (the `pg` driver): outbox store, relay store, migrations and admin. */
export { PostgresOutboxStore, type PostgresOutboxStoreOptions } from './postgres-outbox-store.ts';
export { PostgresRelayStore, type PostgresRelayStoreOptions, type WakeStatus, type ClaimStats } from './postgres-relay-store.ts';
export { walNames, walSlotName, walProblems, walSlots, dropWalSlots, ensurePublication, dropPublication, PublicationMismatchError, type WalNames, type WalSlotStatus } from './postgres-wal.ts';
export { PostgresAdmin, type DestinationCircuit } from './postgres-admin.ts';
export type { PostgresConnection } from './postgres-connection.ts';
export type { WalCommit } from './pg-wal-stream.ts';
export { pgConnection, type PgConnectionOptions } from './pg-connection.ts';
export { postgresNames, type PostgresNames, type PostgresNamesOptions } from './postgres-sql.ts';
export { migratePostgres, printMigrations, postgresMigrations, assertMigrated, type Migration } from './postgres-migrations.ts';
export { PostgresInboxStore, inboxNames, type PostgresInboxStoreOptions } from './postgres-inbox-store.ts';
export { applyVersioned, type VersionedUpsert, type VersionedResult } from './postgres-projection.ts';
export { migrateInbox, postgresInboxMigrations } from './postgres-migrations.ts';
export { PostgresInboxAdmin, type InboxConsumerStatus, type DeadEvent } from './postgres-inbox-admin.ts';
