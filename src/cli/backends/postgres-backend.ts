/** The CLI's PostgreSQL backend: what the commands did before the store seam, unchanged. */
import type { Logger } from '../../core/logger.ts';
import { ConfigError, SchemaError } from '../../core/errors.ts';
import { CliError, EXIT, configMessage } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';
import { openDatabase } from '../database.ts';
import { PostgresAdmin } from '../../stores/postgres/postgres-admin.ts';
import { PostgresInboxAdmin } from '../../stores/postgres/postgres-inbox-admin.ts';
import { inboxNames } from '../../stores/postgres/postgres-inbox-store.ts';
import { assertMigrated, migrateInbox, migratePostgres, postgresInboxMigrations, printMigrations } from '../../stores/postgres/postgres-migrations.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';
import { postgresNames, type PostgresNames } from '../../stores/postgres/postgres-sql.ts';
import { walSlots } from '../../stores/postgres/postgres-wal.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import type { CliBackend, CliInbox } from './backend.ts';

export async function openPostgresBackend(config: CliConfig, logger: Logger, requireSchema: boolean, applicationName: string): Promise<CliBackend> {
  const db = await openDatabase(config, logger, requireSchema, applicationName);
  const names = { schema: config.schema, table: config.table };
  return {
    store: 'postgres',
    outbox: db.names.outbox,
    postgres: db,
    migrate: () => migratePostgres(db.connection, db.names),
    relayStore: ({ deleteOnPublish, synchronousMarks, wake, logger: log }) =>
      new PostgresRelayStore({ ...names, connection: db.connection, deleteOnPublish, synchronousMarks: synchronousMarks ?? false, wake, logger: log }),
    async status() {
      const admin = new PostgresAdmin(db.connection, names);
      const status = await admin.status();
      const circuits = await admin.circuits();
      // Slots are listed only for databases that have them (pg_replication_slots is readable by all).
      const slots = await walSlots(db.connection, db.names).catch(() => []);
      return { store: 'postgres', status, circuits, slots };
    },
    admin: () => new PostgresAdmin(db.connection, names),
    close: () => db.connection.close(),
    prune: (olderThanMs, batchSize, onProgress) => new PostgresAdmin(db.connection, names).prune(olderThanMs, batchSize, onProgress),
    inbox: (table) => postgresInbox(db.connection, config.schema, table),
    dashboard: () => new PostgresAdmin(db.connection, names),
  };
}

/** The inbox table's names (in --schema), a bad --inbox-table named as such. */
function inboxNamesOf(schema: string, table: string): PostgresNames {
  try {
    return inboxNames({ schema, table });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, { table: '--inbox-table', schema: '--schema' }));
    throw err;
  }
}

function postgresInbox(connection: PostgresConnection, schema: string, table: string): CliInbox {
  const n = inboxNamesOf(schema, table);
  return {
    table: n.outbox,
    migrate: () => migrateInbox(connection, n),
    async assertMigrated() {
      try {
        await assertMigrated(connection, n, postgresInboxMigrations());
      } catch (err) {
        if (err instanceof SchemaError) throw new CliError(err.message.replace('txbox migrate', 'txbox inbox migrate'), EXIT.database);
        throw err;
      }
    },
    admin: () => new PostgresInboxAdmin(connection, { schema, table }),
  };
}

export function printPostgres(config: CliConfig): string {
  try {
    return printMigrations(postgresNames({ schema: config.schema, table: config.table }));
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
    throw err;
  }
}

export function printPostgresInbox(config: CliConfig, table: string): string {
  return printMigrations(inboxNamesOf(config.schema, table), postgresInboxMigrations());
}
