import type { Pool, PoolConnection, PoolOptions } from 'mysql2/promise';
import { abandonsConnection, ConfigError, TransactionRolledBackError } from '../../core/errors.ts';

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
      let discard = false;
      try {
        await conn.beginTransaction();
        const guarded = guardRollback(conn);
        const out = await fn(guarded.tx);
        if (guarded.rolledBack()) throw rolledBackError();
        await conn.commit();
        return out;
      } catch (err) {
        // Code still running may use this connection (an abandoned handler): destroyed, never pooled
        // again; the server rolls the transaction back when the connection closes.
        discard = abandonsConnection(err);
        if (!discard) await conn.rollback().catch(() => {});
        throw err;
      } finally {
        if (discard) conn.destroy();
        else conn.release();
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

/** SERVER_STATUS_IN_TRANS in the server's OK packet. */
const IN_TRANSACTION = 1;
const ER_LOCK_DEADLOCK = 1213;

function rolledBackError(): TransactionRolledBackError {
  return new TransactionRolledBackError(
    'the transaction was rolled back: a statement in it failed in a way that rolls back the whole transaction (an InnoDB deadlock victim, say) and its error was caught; nothing of it was committed, and later statements were refused. Let the error propagate, and run the transaction again',
  );
}

/**
 * The connection as the transaction's callback gets it: a statement error that
 * rolled the whole transaction back (InnoDB's deadlock victim; a lock wait
 * timeout with innodb_rollback_on_timeout) is noted, asking the server whether
 * the transaction is still open when the error does not say, and every later
 * statement is refused: it would run in autocommit, committed on its own, and
 * COMMIT would then succeed on nothing. Costs nothing until a statement fails.
 */
function guardRollback(conn: PoolConnection): { tx: PoolConnection; rolledBack(): boolean } {
  let dead = false;
  const still = async (): Promise<boolean> => {
    const [header] = (await conn.query('DO 0')) as unknown as [{ serverStatus?: number }];
    return ((header.serverStatus ?? IN_TRANSACTION) & IN_TRANSACTION) !== 0;
  };
  const wrap =
    (method: (...args: unknown[]) => Promise<unknown>) =>
    async (...args: unknown[]): Promise<unknown> => {
      if (dead) throw rolledBackError();
      try {
        return await method.apply(conn, args);
      } catch (err) {
        const errno = (err as { errno?: unknown }).errno;
        if (errno === ER_LOCK_DEADLOCK || !(await still().catch(() => true))) dead = true;
        throw err;
      }
    };
  const query = wrap(conn.query as never);
  const execute = wrap(conn.execute as never);
  const tx = new Proxy(conn, {
    get(target, prop) {
      if (prop === 'query') return query;
      if (prop === 'execute') return execute;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { tx, rolledBack: () => dead };
}
