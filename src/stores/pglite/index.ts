/**
 * Embedded PGlite backend, the zero-setup default. PGlite is PostgreSQL
 * compiled to WebAssembly, so this backend runs the PostgreSQL backend's SQL
 * unchanged; only the connection differs.
 *
 * @example
 * import { PGlite } from '@electric-sql/pglite';
 * import { pgliteConnection, PgliteOutboxStore, PgliteRelayStore, migratePglite } from 'txbox/pglite';
 * const db = new PGlite('./data');
 * const connection = pgliteConnection(db);
 * await migratePglite(connection);
 */
import { migratePostgres } from '../postgres/postgres-migrations.ts';
import type { PostgresConnection } from '../postgres/postgres-connection.ts';
import { postgresNames, type PostgresNamesOptions } from '../postgres/postgres-sql.ts';

export { pgliteConnection } from './pglite-connection.ts';
export {
  PostgresOutboxStore as PgliteOutboxStore,
  type PostgresOutboxStoreOptions as PgliteOutboxStoreOptions,
} from '../postgres/postgres-outbox-store.ts';
export {
  PostgresRelayStore as PgliteRelayStore,
  type PostgresRelayStoreOptions as PgliteRelayStoreOptions,
} from '../postgres/postgres-relay-store.ts';
export { PostgresAdmin as PgliteAdmin } from '../postgres/postgres-admin.ts';

/** Applies txbox's migrations to a PGlite database. Returns the names applied now. */
export function migratePglite(connection: PostgresConnection, options: PostgresNamesOptions = {}): Promise<string[]> {
  return migratePostgres(connection, postgresNames(options));
}
export { PostgresInboxStore as PgliteInboxStore, inboxNames } from '../postgres/postgres-inbox-store.ts';
export { applyVersioned } from '../postgres/postgres-projection.ts';
export { migrateInbox } from '../postgres/postgres-migrations.ts';
