import type { Pool, PoolConnection, PoolOptions } from 'mysql2/promise';
import { ConfigError } from '../../core/errors.ts';

/**
 * The caller's transaction on MySQL or MariaDB: a `mysql2/promise`
 * connection (a `PoolConnection` after `beginTransaction()`). Placeholders
 * are `?`. A `pg` client does not fit this type.
 */
export interface MysqlExecutor {
  query(sql: string, values?: unknown[]): Promise<[unknown, unknown]>;
  beginTransaction(): Promise<void>;
}

/** What the MySQL backend needs from a database handle it owns: autocommit queries, a transaction, a dedicated connection. */
export interface MysqlConnection {
  /** Runs one statement in autocommit; resolves with its rows (or the result header for writes). */
  query<R = Record<string, unknown>>(sql: string, values?: unknown[]): Promise<R[]>;
  /** Runs `fn` in a transaction on one connection; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: PoolConnection) => Promise<T>): Promise<T>;
  /** Runs `fn` on one connection, outside a transaction (GET_LOCK is per connection). */
  withConnection<T>(fn: (conn: PoolConnection) => Promise<T>): Promise<T>;
  /** Ends the pool if this handle created it. */
  close(): Promise<void>;
}

export interface MysqlConnectionOptions {
  /** A mysql2/promise pool of the caller (not ended by close()). Either this or `uri`. */
  readonly pool?: Pool;
  /** `mysql://user:password@host:3306/database`: a pool is created and ended by close(). */
  readonly uri?: string;
  /** Connections of a created pool. Default: 4. */
  readonly maxConnections?: number;
}

/**
 * A MysqlConnection over a mysql2/promise pool.
 * @example
 * const connection = await mysqlConnection({ uri: 'mysql://app@127.0.0.1:3306/app' });
 */
export async function mysqlConnection(options: MysqlConnectionOptions): Promise<MysqlConnection> {
  if (!options || (options.pool === undefined) === (options.uri === undefined)) throw new ConfigError('pool', 'pass either pool (a mysql2/promise Pool) or uri (mysql://user@host:3306/database)');
  let pool = options.pool;
  const owned = pool === undefined;
  if (!pool) {
    const { default: mysql } = await import('mysql2/promise');
    const config: PoolOptions = { uri: options.uri!, connectionLimit: options.maxConnections ?? 4, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' };
    pool = mysql.createPool(config);
  }
  const p = pool;
  return {
    async query<R>(sql: string, values?: unknown[]) {
      const [rows] = await p.query(sql, values);
      return rows as unknown as R[];
    },
    async transaction(fn) {
      const conn = await p.getConnection();
      try {
        await conn.beginTransaction();
        const out = await fn(conn);
        await conn.commit();
        return out;
      } catch (err) {
        await conn.rollback().catch(() => {});
        throw err;
      } finally {
        conn.release();
      }
    },
    async withConnection(fn) {
      const conn = await p.getConnection();
      try {
        return await fn(conn);
      } finally {
        conn.release();
      }
    },
    async close() {
      if (owned) await p.end();
    },
  };
}
