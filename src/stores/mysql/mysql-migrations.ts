import { readdirSync, readFileSync } from 'node:fs';
import { SchemaError } from '../../core/errors.ts';
import type { MysqlConnection } from './mysql-connection.ts';
import type { MysqlInboxNames, MysqlNames } from './mysql-sql.ts';

export interface MysqlMigration {
  /** File name, e.g. `001_outbox.sql`; applied in name order. */
  readonly name: string;
  readonly sql: string;
}

const SQL_DIR = new URL('../../../sql/mysql/', import.meta.url);
const INBOX_SQL_DIR = new URL('../../../sql/mysql-inbox/', import.meta.url);

/** The numbered migration files shipped in `sql/mysql/`, with placeholders. */
export function mysqlMigrations(dir: URL = SQL_DIR): MysqlMigration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => ({ name, sql: readFileSync(new URL(name, dir), 'utf8') }));
}

/** The inbox's migration files (`sql/mysql-inbox/`). */
export function mysqlInboxMigrations(): MysqlMigration[] {
  return mysqlMigrations(INBOX_SQL_DIR);
}

function render(sql: string, n: MysqlNames): string {
  return sql.replaceAll('{{outbox}}', n.outbox).replaceAll('{{buckets}}', n.buckets).replaceAll('{{relays}}', n.relays).replaceAll('{{audit}}', n.audit);
}

function renderInbox(sql: string, n: MysqlInboxNames): string {
  return sql.replaceAll('{{inbox}}', n.inbox).replaceAll('{{keys}}', n.keys).replaceAll('{{audit}}', n.audit);
}

/** The statements of one migration: MySQL runs one statement per call (DDL commits on its own, so a file is not atomic). */
function statements(sql: string): string[] {
  return sql
    .split(/;\s*\n/)
    .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
    .filter((s) => s.length > 0);
}

/** The SQL `txbox migrate --print` would show: every migration rendered, for the user's own migration tool. */
export function printMysqlMigrations(n: MysqlNames): string {
  return mysqlMigrations()
    .map((m) => `-- ${m.name}\n${render(m.sql, n).trim()}\n`)
    .join('\n');
}

/** The inbox's SQL as `--print` shows it (see `mysqlInboxNames`). */
export function printMysqlInboxMigrations(n: MysqlInboxNames): string {
  return mysqlInboxMigrations()
    .map((m) => `-- ${m.name}\n${renderInbox(m.sql, n).trim()}\n`)
    .join('\n');
}

/** Applies the inbox migrations to the inbox tables named by `n` (see `mysqlInboxNames`), under GET_LOCK like the outbox's. */
export function migrateMysqlInbox(connection: MysqlConnection, n: MysqlInboxNames, lockTimeoutSeconds = 60): Promise<string[]> {
  return applyMigrations(connection, n, mysqlInboxMigrations().map((m) => ({ name: m.name, sql: renderInbox(m.sql, n) })), lockTimeoutSeconds);
}

/**
 * Applies the migrations not yet applied, under GET_LOCK so that relays and
 * deploys starting at once do not race. Returns the names applied now.
 */
export function migrateMysql(connection: MysqlConnection, n: MysqlNames, lockTimeoutSeconds = 60): Promise<string[]> {
  return applyMigrations(connection, n, mysqlMigrations().map((m) => ({ name: m.name, sql: render(m.sql, n) })), lockTimeoutSeconds);
}

/** ER_DUP_FIELDNAME: the column exists. */
const DUPLICATE_COLUMN = 1060;
/** A statement that adds exactly one column and does nothing else (no comma outside parentheses, nested up to two deep, after ADD COLUMN). */
const ADD_ONE_COLUMN = /^ALTER TABLE\s+\S+\s+ADD COLUMN\s+[a-z_][a-z0-9_]*\s+(?:[^,()]|\((?:[^()]|\([^()]*\))*\))*$/i;

/** Applies the rendered `migrations` not yet recorded in `n.migrations`, holding GET_LOCK(`n.lockName`). */
async function applyMigrations(connection: MysqlConnection, n: { readonly migrations: string; readonly lockName: string }, migrations: readonly MysqlMigration[], lockTimeoutSeconds: number): Promise<string[]> {
  return connection.withConnection(async (conn) => {
    const [[lock]] = (await conn.query('SELECT GET_LOCK(?, ?) AS got', [n.lockName, lockTimeoutSeconds])) as unknown as [{ got: number | string | null }[]];
    if (Number(lock?.got) !== 1) throw new SchemaError(`could not take the migration lock ${n.lockName} within ${lockTimeoutSeconds} s: another txbox migrate is running; wait for it and run again`);
    try {
      await conn.query(`CREATE TABLE IF NOT EXISTS ${n.migrations} (name VARCHAR(200) NOT NULL PRIMARY KEY, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`);
      const [done] = (await conn.query(`SELECT name FROM ${n.migrations}`)) as unknown as [{ name: string }[]];
      const applied = new Set(done.map((r) => r.name));
      const now: string[] = [];
      for (const m of migrations) {
        if (applied.has(m.name)) continue;
        for (const statement of statements(m.sql)) {
          try {
            await conn.query(statement);
          } catch (err) {
            // DDL commits on its own: a run that crashed after an ADD COLUMN and before recording the migration
            // left the column there. MySQL 8 has no ADD COLUMN IF NOT EXISTS, so that column counts as added.
            if (!((err as { errno?: unknown }).errno === DUPLICATE_COLUMN && ADD_ONE_COLUMN.test(statement))) throw err;
          }
        }
        await conn.query(`INSERT INTO ${n.migrations} (name, applied_at) VALUES (?, UTC_TIMESTAMP(6))`, [m.name]);
        now.push(m.name);
      }
      return now;
    } finally {
      await conn.query('SELECT RELEASE_LOCK(?)', [n.lockName]);
    }
  });
}

/** ER_NO_SUCH_TABLE. */
const NO_SUCH_TABLE = 1146;

/**
 * Throws a SchemaError naming the fix when the tables of `n` do not exist or
 * miss a migration of this version. Changes nothing.
 */
export function assertMysqlMigrated(connection: MysqlConnection, n: MysqlNames, migrations = mysqlMigrations()): Promise<void> {
  return assertApplied(connection, n.migrations, `the txbox tables ${n.outbox}`, '`txbox migrate` (or apply `txbox migrate --print`)', migrations);
}

/** As `assertMysqlMigrated`, for the inbox tables of `n` (see `mysqlInboxNames`). */
export function assertMysqlInboxMigrated(connection: MysqlConnection, n: MysqlInboxNames): Promise<void> {
  return assertApplied(connection, n.migrations, `the txbox inbox tables ${n.inbox}`, '`txbox inbox migrate` (or `migrateMysqlInbox`, or apply `txbox inbox migrate --print`)', mysqlInboxMigrations());
}

async function assertApplied(connection: MysqlConnection, migrationsTable: string, what: string, fix: string, migrations: readonly MysqlMigration[]): Promise<void> {
  let done: Set<string>;
  try {
    done = new Set((await connection.query<{ name: string }>(`SELECT name FROM ${migrationsTable}`)).map((r) => r.name));
  } catch (err) {
    if ((err as { errno?: number }).errno !== NO_SUCH_TABLE) throw err;
    throw new SchemaError(`${what} do not exist yet; run ${fix} first`, { cause: err });
  }
  const missing = migrations.filter((m) => !done.has(m.name)).map((m) => m.name);
  if (missing.length > 0) throw new SchemaError(`${what} are behind this version (missing ${missing.join(', ')}); run ${fix.replace(/ \(.*\)$/, '')}`);
}
