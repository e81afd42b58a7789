/**
 * The CLI's MySQL / MariaDB backend (mysql:// or mariadb:// URLs): the
 * tables live in the database the URL names, `--table` is their prefix.
 * Relays wake by polling and record their open circuits; there are no WAL
 * slots or schemas.
 */
import { ConfigError, SchemaError } from '../../core/errors.ts';
import { CliError, EXIT, configMessage, redactUrl } from '../cli-error.ts';
import type { CliConfig } from '../config.ts';
import { importOptional } from '../optional-import.ts';
import { MysqlAdmin } from '../../stores/mysql/mysql-admin.ts';
import { mysqlConnection, type MysqlConnection } from '../../stores/mysql/mysql-connection.ts';
import { MysqlInboxAdmin } from '../../stores/mysql/mysql-inbox-admin.ts';
import { assertMysqlInboxMigrated, assertMysqlMigrated, migrateMysql, migrateMysqlInbox, printMysqlInboxMigrations, printMysqlMigrations } from '../../stores/mysql/mysql-migrations.ts';
import { MysqlRelayStore } from '../../stores/mysql/mysql-relay-store.ts';
import { mysqlInboxNames, mysqlNames, type MysqlInboxNames, type MysqlNames } from '../../stores/mysql/mysql-sql.ts';
import type { CliAdmin, CliBackend, CliInbox, CliInboxAdmin } from './backend.ts';

/** The validated names of the configured tables, a ConfigError turned into a message naming the flag. */
function names(config: CliConfig): MysqlNames {
  try {
    return mysqlNames({ table: config.table });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
    throw err;
  }
}

export function printMysql(config: CliConfig): string {
  return printMysqlMigrations(names(config));
}

/** The validated names of an inbox table (`--inbox-table`), in the URL's database. */
function inboxNamesOf(table: string): MysqlInboxNames {
  try {
    return mysqlInboxNames({ table });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(configMessage(err, { table: '--inbox-table' }));
    throw err;
  }
}

export function printMysqlInbox(table: string): string {
  return printMysqlInboxMigrations(inboxNamesOf(table));
}

/** mysql2 reads any scheme; mariadb:// is said to it as mysql://. */
function driverUri(url: string): string {
  return url.trim().replace(/^mariadb:/i, 'mysql:');
}

export async function openMysqlBackend(config: CliConfig, requireSchema: boolean): Promise<CliBackend> {
  const n = names(config);
  const url = config.databaseUrl!;
  const from = config.sources.databaseUrl;
  let parsed: URL;
  try {
    parsed = new URL(driverUri(url));
  } catch {
    throw new CliError(`${from}: not a URL; give mysql://user:password@host:3306/database`);
  }
  if (parsed.pathname.replace(/^\//, '') === '') {
    throw new CliError(`${from}: ${redactUrl(url)} names no database; the txbox tables live in the URL's database: mysql://user@host:3306/DATABASE`);
  }
  // mysql2 is loaded here, by the first MySQL URL: a missing package is named with the command that installs it.
  const connection = await importOptional('txbox on MySQL', () => mysqlConnection({ uri: driverUri(url), maxConnections: 6 }));
  try {
    await connection.query('SELECT 1');
  } catch (err) {
    await connection.close().catch(() => {});
    throw new CliError(`${mysqlConnectProblem(err, redactUrl(url))} (from ${from}): ${(err as Error).message}`, EXIT.database);
  }
  if (requireSchema) {
    try {
      await assertMysqlMigrated(connection, n);
    } catch (err) {
      await connection.close().catch(() => {});
      if (err instanceof SchemaError) throw new CliError(err.message, EXIT.database);
      throw err;
    }
  }
  return backend(connection, n, config);
}

function backend(connection: MysqlConnection, n: MysqlNames, config: CliConfig): CliBackend {
  const admin = new MysqlAdmin(connection, { table: n.table });
  return {
    store: 'mysql',
    outbox: n.outbox,
    postgres: undefined,
    migrate: () => migrateMysql(connection, n),
    relayStore: ({ deleteOnPublish }) => new MysqlRelayStore({ connection, table: config.table, deleteOnPublish }),
    status: async () => {
      const [status, circuits] = await Promise.all([admin.status(), admin.circuits()]);
      return { store: 'mysql', status, circuits };
    },
    admin: (): CliAdmin => admin,
    close: () => connection.close(),
    prune: (olderThanMs, batchSize, onProgress) => admin.prune(olderThanMs, batchSize, onProgress),
    inbox: (table) => mysqlInbox(connection, table),
    dashboard: () => admin,
  };
}

/** `txbox inbox` on MySQL: the inbox tables in the URL's database, migrated under GET_LOCK like the outbox's. */
function mysqlInbox(connection: MysqlConnection, table: string): CliInbox {
  const n = inboxNamesOf(table);
  const admin = new MysqlInboxAdmin(connection, { table: n.table });
  const inboxAdmin: CliInboxAdmin = {
    status: () => admin.status(),
    listDead: (options) => admin.listDead(options),
    listHeld: (options) => admin.listHeld(options),
    retryDead: (selector, actor) => admin.retryDead(selector, actor),
    retryHeld: (selector, actor) => admin.retryHeld(selector, actor),
    discardDead: (selector, actor) => admin.discardDead(selector, actor),
    prune: (olderThanMs, batchSize, onProgress) => admin.prune(olderThanMs, batchSize, onProgress),
    pruneExtra: async (batchSize, onProgress) => ({ deleted: await admin.pruneKeys(batchSize, onProgress), what: `key lock row(s) of ${n.keys} without open events` }),
  };
  return {
    table: n.inbox,
    migrate: () => migrateMysqlInbox(connection, n),
    async assertMigrated() {
      try {
        await assertMysqlInboxMigrated(connection, n);
      } catch (err) {
        if (err instanceof SchemaError) throw new CliError(err.message, EXIT.database);
        throw err;
      }
    },
    admin: () => inboxAdmin,
  };
}

/**
 * What went wrong when connecting, in the user's terms: the server answered
 * but refused the login (1045) or the database (1049, 1044), or it could
 * not be reached at all.
 */
export function mysqlConnectProblem(err: unknown, url: string): string {
  const errno = (err as { errno?: unknown }).errno;
  if (errno === 1045) return `the database at ${url} was reached but refused the login; check the user name and password in the URL`;
  if (errno === 1049) return `the server at ${url} was reached but has no such database; create it (CREATE DATABASE) or fix the database name in the URL`;
  if (errno === 1044) return `the server at ${url} was reached but refused access to that database; grant the user access or fix the database name in the URL`;
  if (typeof errno === 'number' && errno >= 1000 && errno < 4000) return `the database at ${url} was reached but refused the connection`;
  return `cannot reach the database at ${url}; check the host and port, and that MySQL or MariaDB is running`;
}
