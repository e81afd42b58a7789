/** PostgreSQL backend (the `pg` driver): outbox store, relay store, migrations and admin. */
export { PostgresOutboxStore, type PostgresOutboxStoreOptions } from './postgres-outbox-store.ts';
export { PostgresRelayStore, type PostgresRelayStoreOptions } from './postgres-relay-store.ts';
export { PostgresAdmin } from './postgres-admin.ts';
export type { PostgresConnection } from './postgres-connection.ts';
export { pgConnection, type PgConnectionOptions } from './pg-connection.ts';
export { postgresNames, type PostgresNames, type PostgresNamesOptions } from './postgres-sql.ts';
export { migratePostgres, printMigrations, postgresMigrations, assertMigrated, type Migration } from './postgres-migrations.ts';
