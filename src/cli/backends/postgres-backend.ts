/** The CLI's PostgreSQL backend: what the commands did before the store seam, unchanged. */
import type { Logger } from '../../core/logger.ts';
import { ConfigError } from '../../core/errors.ts';
import { CliError, configMessage } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';
import { openDatabase } from '../database.ts';
import { PostgresAdmin } from '../../stores/postgres/postgres-admin.ts';
import { migratePostgres, printMigrations } from '../../stores/postgres/postgres-migrations.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { walSlots } from '../../stores/postgres/postgres-wal.ts';
import type { CliBackend } from './backend.ts';

export async function openPostgresBackend(config: CliConfig, logger: Logger, requireSchema: boolean, applicationName: string): Promise<CliBackend> {
  const db = await openDatabase(config, logger, requireSchema, applicationName);
  const names = { schema: config.schema, table: config.table };
  return {
    store: 'postgres',
    outbox: db.names.outbox,
    postgres: db,
    migrate: () => migratePostgres(db.connection, db.names),
    relayStore: ({ deleteOnPublish, wake, logger: log }) => new PostgresRelayStore({ ...names, connection: db.connection, deleteOnPublish, wake, logger: log }),
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
