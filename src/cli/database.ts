import { CliError, EXIT, redactUrl } from './cli-error.ts';
import type { CliConfig } from './config.ts';
import type { Logger } from '../core/logger.ts';
import { SchemaError } from '../core/errors.ts';
import { pgConnection } from '../stores/postgres/pg-connection.ts';
import type { PostgresConnection } from '../stores/postgres/postgres-connection.ts';
import { assertMigrated } from '../stores/postgres/postgres-migrations.ts';
import { postgresNames, type PostgresNames } from '../stores/postgres/postgres-sql.ts';
import { ConfigError } from '../core/errors.ts';

export interface OpenDatabase {
  readonly connection: PostgresConnection;
  readonly names: PostgresNames;
}

/**
 * Opens the configured PostgreSQL database and checks that it answers (and,
 * with `requireSchema`, that it is migrated). Its connections carry
 * `applicationName` (`txbox <command>`) in pg_stat_activity, unless the URL
 * sets its own application_name.
 */
export async function openDatabase(config: CliConfig, logger: Logger, requireSchema = true, applicationName = 'txbox'): Promise<OpenDatabase> {
  let names: PostgresNames;
  try {
    names = postgresNames({ schema: config.schema, table: config.table });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`${config.sources[err.field] ?? err.field}: ${err.message}`);
    throw err;
  }
  if (!config.databaseUrl) {
    throw new CliError('no database: pass --database-url, set TXBOX_DATABASE_URL, or put databaseUrl in txbox.config.json');
  }
  let connection: PostgresConnection;
  try {
    connection = pgConnection({ connectionString: config.databaseUrl, maxConnections: 6, applicationName, logger });
  } catch (err) {
    throw new CliError(`${config.sources.databaseUrl}: ${(err as Error).message}`);
  }
  try {
    await connection.query('SELECT 1');
  } catch (err) {
    await connection.close().catch(() => {});
    throw new CliError(`cannot reach the database at ${redactUrl(config.databaseUrl)} (from ${config.sources.databaseUrl}): ${(err as Error).message}`, EXIT.database);
  }
  if (requireSchema) {
    try {
      await assertMigrated(connection, names);
    } catch (err) {
      await connection.close().catch(() => {});
      if (err instanceof SchemaError) throw new CliError(err.message, EXIT.database);
      throw err;
    }
  }
  return { connection, names };
}
