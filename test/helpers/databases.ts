/**
 * Test databases: a fresh schema per test on the real PostgreSQL at
 * 127.0.0.1:5432, or a fresh in-memory PGlite. Both are dropped afterwards.
 */
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { pgConnection, migratePostgres, postgresNames, type PostgresConnection } from 'txbox/postgres';
import { pgliteConnection } from 'txbox/pglite';
import type { SqlExecutor } from 'txbox';

export const DATABASE_URL = process.env.TXBOX_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDb {
  readonly kind: 'postgres' | 'pglite';
  readonly schema: string;
  readonly connection: PostgresConnection;
  /** Runs fn in a transaction of the app (not the relay's). */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T>;
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<R[]>;
  close(): Promise<void>;
}

export function uniqueSchema(prefix = 't'): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export async function openDb(kind: 'postgres' | 'pglite', options: { migrate?: boolean; schema?: string } = {}): Promise<TestDb> {
  const schema = options.schema ?? uniqueSchema();
  let connection: PostgresConnection;
  let closeAll: () => Promise<void>;
  if (kind === 'postgres') {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 8 });
    connection = pgConnection({ pool });
    closeAll = async () => {
      await connection.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
      await pool.end();
    };
  } else {
    const db = new PGlite();
    connection = pgliteConnection(db);
    closeAll = async () => {
      await connection.close();
      await db.close();
    };
  }
  if (options.migrate ?? true) await migratePostgres(connection, postgresNames({ schema }));
  return {
    kind,
    schema,
    connection,
    transaction: (fn) => connection.transaction(fn),
    query: async <R>(text: string, params?: unknown[]) => (await connection.query<R>(text, params)).rows,
    close: closeAll,
  };
}

export const BACKENDS = ['postgres', 'pglite'] as const;

/**
 * Makes PostgreSQL refuse the inbox's own rows that match `refused` (a CHECK
 * constraint someone added: a dead event no row can keep) until `allow()`;
 * `allow()` is idempotent, so a test calls it again in `finally`.
 */
export async function refuseInboxRows(db: TestDb, refused: string): Promise<{ allow(): Promise<void> }> {
  const name = `refuse_${Math.random().toString(36).slice(2, 10)}`;
  await db.query(`ALTER TABLE "${db.schema}".inbox ADD CONSTRAINT ${name} CHECK (NOT (${refused}))`);
  let allowed = false;
  return {
    allow: async () => {
      if (!allowed) await db.query(`ALTER TABLE "${db.schema}".inbox DROP CONSTRAINT ${name}`);
      allowed = true;
    },
  };
}
