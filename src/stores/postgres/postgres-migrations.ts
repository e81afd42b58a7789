import { readdirSync, readFileSync } from 'node:fs';
import { SchemaError } from '../../core/errors.ts';
import { quoteIdent } from '../../core/identifiers.ts';
import type { SqlExecutor } from '../../core/ports.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import type { PostgresNames } from './postgres-sql.ts';

export interface Migration {
  /** File name, e.g. `001_outbox.sql`; applied in name order. */
  readonly name: string;
  readonly sql: string;
}

const SQL_DIR = new URL('../../../sql/postgres/', import.meta.url);
const INBOX_SQL_DIR = new URL('../../../sql/postgres-inbox/', import.meta.url);

/** The numbered migration files shipped in `sql/postgres/`, with placeholders. */
export function postgresMigrations(dir: URL = SQL_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => ({ name, sql: readFileSync(new URL(name, dir), 'utf8') }));
}

/** The inbox's migration files (`sql/postgres-inbox/`). */
export function postgresInboxMigrations(): Migration[] {
  return postgresMigrations(INBOX_SQL_DIR);
}

/** Applies the inbox migrations to the inbox table named by `names` (see `inboxNames`). */
export function migrateInbox(db: PostgresConnection, names: PostgresNames): Promise<string[]> {
  return migratePostgres(db, names, postgresInboxMigrations());
}

/** Replaces `{{schema}}`, `{{table}}` and `{{table:_suffix}}` with quoted names. */
export function renderMigration(sql: string, names: PostgresNames): string {
  return sql.replace(/\{\{(schema|table)(?::([A-Za-z0-9_]+))?\}\}/g, (_m, what: string, suffix?: string) =>
    what === 'schema' ? quoteIdent(names.schema) : suffix ? names.suffixed(suffix) : quoteIdent(names.table),
  );
}

function lockKey(names: PostgresNames): string {
  return `txbox:${names.schema}.${names.table}`;
}

/**
 * Taken before the table's lock: migrations of other tables into the same
 * schema (the outbox and the inbox starting together) would otherwise both run
 * CREATE SCHEMA IF NOT EXISTS, and the second fails on pg_namespace's unique
 * index (23505). Always schema first, then table: no deadlock.
 */
function schemaLockKey(names: PostgresNames): string {
  return `txbox-schema:${names.schema}`;
}

function bootstrapSql(names: PostgresNames): string[] {
  return [
    `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(names.schema)}`,
    `CREATE TABLE IF NOT EXISTS ${names.migrations} (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
  ];
}

/** Splits a migration file into statements (our files keep `;` only at line ends). */
export function splitStatements(sql: string): string[] {
  const out: string[] = [];
  let current: string[] = [];
  let dollarTag: string | undefined; // inside a $tag$ ... $tag$ body (function bodies hold `;` of their own)
  for (const line of sql.split('\n')) {
    if (dollarTag === undefined && /^\s*--/.test(line)) continue;
    current.push(line);
    for (const m of line.matchAll(/\$[A-Za-z_]*\$/g)) dollarTag = dollarTag === undefined ? m[0] : dollarTag === m[0] ? undefined : dollarTag;
    if (dollarTag === undefined && /;\s*$/.test(line)) {
      out.push(current.join('\n').replace(/;\s*$/, '').trim());
      current = [];
    }
  }
  out.push(current.join('\n').trim());
  return out.filter((s) => s.length > 0);
}

/**
 * The whole schema as one SQL script, for users' own migration tools
 * (`txbox migrate --print`). Idempotent: every statement uses IF NOT EXISTS.
 */
export function printMigrations(names: PostgresNames, migrations = postgresMigrations()): string {
  const out = [`-- txbox schema for ${names.outbox}`, 'BEGIN;', `SELECT pg_advisory_xact_lock(hashtext('${schemaLockKey(names)}'));`, `SELECT pg_advisory_xact_lock(hashtext('${lockKey(names)}'));`];
  for (const s of bootstrapSql(names)) out.push(`${s};`);
  for (const m of migrations) {
    out.push(`\n-- ${m.name}`, renderMigration(m.sql, names).trim());
    out.push(`INSERT INTO ${names.migrations} (name) VALUES ('${m.name}') ON CONFLICT DO NOTHING;`);
  }
  out.push('COMMIT;', '');
  return out.join('\n');
}

/**
 * Applies pending migrations in one transaction under an advisory lock, so
 * that two deploys migrating at once apply each migration exactly once.
 * Returns the names applied now (empty when up to date).
 */
export async function migratePostgres(db: PostgresConnection, names: PostgresNames, migrations = postgresMigrations()): Promise<string[]> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [schemaLockKey(names)]);
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [lockKey(names)]);
    for (const s of bootstrapSql(names)) await tx.query(s);
    const done = await appliedMigrations(tx, names);
    const applied: string[] = [];
    for (const m of migrations) {
      if (done.has(m.name)) continue;
      for (const statement of splitStatements(renderMigration(m.sql, names))) await tx.query(statement);
      await tx.query(`INSERT INTO ${names.migrations} (name) VALUES ($1)`, [m.name]);
      applied.push(m.name);
    }
    return applied;
  });
}

async function appliedMigrations(db: SqlExecutor, names: PostgresNames): Promise<Set<string>> {
  const { rows } = await db.query(`SELECT name FROM ${names.migrations}`);
  return new Set((rows as { name: string }[]).map((r) => r.name));
}

/** Throws a SchemaError that says what to run when the tables are missing or older than this txbox. */
export async function assertMigrated(db: SqlExecutor, names: PostgresNames, migrations = postgresMigrations()): Promise<void> {
  let done: Set<string>;
  try {
    done = await appliedMigrations(db, names);
  } catch (err) {
    throw new SchemaError(`the txbox tables ${names.outbox} do not exist yet; run \`txbox migrate\` (or apply \`txbox migrate --print\`) first`, { cause: err });
  }
  const missing = migrations.filter((m) => !done.has(m.name)).map((m) => m.name);
  if (missing.length > 0) {
    throw new SchemaError(`the txbox schema of ${names.outbox} is behind this version (missing ${missing.join(', ')}); run \`txbox migrate\``);
  }
}
