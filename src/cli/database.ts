import { CliError, EXIT, configMessage, redactUrl } from './cli-error.ts';
import type { CliConfig } from './config.ts';
import type { Logger } from '../core/logger.ts';
import { SchemaError } from '../core/errors.ts';
import { pgConnection } from '../stores/postgres/pg-connection.ts';
import type { PostgresConnection } from '../stores/postgres/postgres-connection.ts';
import { assertMigrated } from '../stores/postgres/postgres-migrations.ts';
import { postgresNames, type PostgresNames } from '../stores/postgres/postgres-sql.ts';
import { ConfigError } from '../core/errors.ts';
import { storeOf } from './backends/backend.ts';

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
  if (storeOf(config.databaseUrl) === 'firestore') {
    throw new CliError(`${config.sources.databaseUrl ?? 'the database URL'} is a Firestore URL: this command runs on PostgreSQL only (on Firestore: migrate, relay, status, parked, replay and demo)`);
  }
  if (storeOf(config.databaseUrl) === 'mysql') {
    throw new CliError(`${config.sources.databaseUrl ?? 'the database URL'} is a MySQL URL: this command runs on PostgreSQL only (on MySQL and MariaDB: migrate, relay, status, parked, replay, prune, inbox, dashboard and demo)`);
  }
  let names: PostgresNames;
  try {
    names = postgresNames({ schema: config.schema, table: config.table });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
    throw err;
  }
  if (!config.databaseUrl) {
    throw new CliError('no database: pass --database-url, set TXBOX_DATABASE_URL, or put databaseUrl in txbox.config.json');
  }
  let connection: PostgresConnection;
  try {
    connection = pgConnection({ connectionString: config.databaseUrl, maxConnections: 6, applicationName, logger });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
    throw err;
  }
  try {
    await connection.query('SELECT 1');
  } catch (err) {
    await connection.close().catch(() => {});
    throw new CliError(`${connectProblem(err, redactUrl(config.databaseUrl))} (from ${config.sources.databaseUrl}): ${(err as Error).message}`, EXIT.database);
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

/**
 * What went wrong when connecting, in the user's terms: PostgreSQL answered
 * but refused the login or the database (SQLSTATE class 28, 3D000), or it
 * could not be reached at all.
 */
export function connectProblem(err: unknown, url: string): string {
  const code = (err as { code?: unknown }).code;
  if (code === '28000' || code === '28P01') return `the database at ${url} was reached but refused the login; check the user name and password in the URL`;
  if (code === '3D000') return `the server at ${url} was reached but has no such database; create it or fix the database name in the URL`;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return `the database at ${url} was reached but refused the connection`;
  return `cannot reach the database at ${url}; check the host and port, and that PostgreSQL is running`;
}
