import type { Pool, PoolConnection, PoolOptions } from 'mysql2/promise';
import { abandonsConnection, ConfigError, QueryTimeoutError, TransactionRolledBackError } from '../../core/errors.ts';

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
  /**
   * Runs one statement in autocommit; resolves with its rows (or the result header for writes).
   * `timeoutMs`: how long to wait for the answer; then the call rejects with a `QueryTimeoutError`
   * and the connection is destroyed, never reused (a server gone silent would otherwise hold the
   * call until TCP gives up, about 15 minutes).
   */
  query<R = Record<string, unknown>>(sql: string, values?: unknown[], timeoutMs?: number): Promise<R[]>;
  /**
   * Runs `fn` in a transaction on one connection; commits when it resolves, rolls back when it throws.
   * `timeoutMs` bounds the whole transaction as `query`'s bounds its statement (the server rolls back).
   */
  transaction<T>(fn: (tx: PoolConnection) => Promise<T>, timeoutMs?: number): Promise<T>;
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
    async query<R>(sql: string, values?: unknown[], timeoutMs?: number) {
      if (timeoutMs === undefined) {
        const [rows] = await p.query(sql, values);
        return rows as unknown as R[];
      }
      const conn = await p.getConnection();
      let gone = false;
      try {
        const [rows] = await bounded(conn, timeoutMs, () => conn.query(sql, values));
        return rows as unknown as R[];
      } catch (err) {
        gone = err instanceof QueryTimeoutError;
        throw err;
      } finally {
        if (!gone) conn.release();
      }
    },
    async transaction(fn, timeoutMs) {
      const conn = await p.getConnection();
      let discard = false;
      const run = async () => {
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
          discard = abandonsConnection(err) || err instanceof QueryTimeoutError;
          if (!discard) await conn.rollback().catch(() => {});
          throw err;
        }
      };
      try {
        return timeoutMs === undefined ? await run() : await bounded(conn, timeoutMs, run);
      } catch (err) {
        if (err instanceof QueryTimeoutError) discard = true;
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

/**
 * `connection` with `timeoutMs` on every `query` and `transaction` that names
 * none: for a component's own statements (the relay store's).
 */
export function boundedMysqlConnection(connection: MysqlConnection, timeoutMs: number): MysqlConnection {
  return {
    query: (sql, values, ms) => connection.query(sql, values, ms ?? timeoutMs),
    transaction: (fn, ms) => connection.transaction(fn, ms ?? timeoutMs),
    withConnection: (fn) => connection.withConnection(fn),
    close: () => connection.close(),
  };
}

/**
 * Runs `work` on `conn`; when it has not settled after `timeoutMs`, destroys
 * the connection (which also ends what is waiting on it) and rejects with a
 * `QueryTimeoutError`. On a timeout the connection is gone: release nothing.
 */
async function bounded<T>(conn: PoolConnection, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      conn.destroy();
      reject(new QueryTimeoutError(timeoutMs));
    }, timeoutMs);
  });
  const running = work();
  running.catch(() => {}); // after a timeout its error (the destroyed connection) is not news
  try {
    return await Promise.race([running, late]);
  } catch (err) {
    throw timedOut ? new QueryTimeoutError(timeoutMs) : err;
  } finally {
    clearTimeout(timer);
  }
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
