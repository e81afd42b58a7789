import type { SqlExecutor } from '../../core/ports.ts';

/**
 * What the PostgreSQL backend needs from a database handle it owns (as opposed
 * to the caller's transaction): autocommit queries, a transaction, and
 * LISTEN. `pgConnection` builds one over a `pg` Pool; `pgliteConnection` over
 * a PGlite instance.
 */
export interface PostgresConnection extends SqlExecutor {
  /**
   * `name`: run as a named prepared statement, parsed and planned once per
   * connection, where the driver has them (node-postgres); others ignore it.
   * Only for fixed statement texts: each name is kept by every connection.
   * `timeoutMs`: how long to wait for the answer; then the call rejects with
   * a `QueryTimeoutError` and the connection is dropped, never reused (its
   * statement may still run; the server ends it when it notices the closed
   * connection). Without it, a connection whose server went silent (a host
   * gone, a firewall that dropped the connection's state) waits until TCP
   * gives up, about 15 minutes on Linux. In-process databases (PGlite) ignore it.
   */
  query<R = Record<string, unknown>>(text: string, params?: unknown[], name?: string, timeoutMs?: number): Promise<{ rows: R[] }>;
  /**
   * Runs `fn` in a transaction on one connection; commits when it resolves, rolls back when it throws.
   * `timeoutMs` bounds the whole transaction, COMMIT included: past it the connection is destroyed
   * (the server rolls back what did not commit) and the call rejects with a `QueryTimeoutError`.
   * In-process databases (PGlite) ignore it.
   */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>, timeoutMs?: number): Promise<T>;
  /** Calls `onNotify` for each notification on `channel`; resolves with a function that stops listening. */
  listen(channel: string, onNotify: () => void): Promise<() => Promise<void>>;
  /**
   * Optional: the settings for a replication connection to the same server
   * (node-postgres `ClientConfig`), for the WAL wake mode. Handles without it
   * (PGlite) wake by LISTEN/NOTIFY and polling.
   */
  replicationConfig?(): Record<string, unknown>;
  /** Closes what this connection opened (not a pool or instance passed in by the caller). */
  close(): Promise<void>;
}

/**
 * `connection` with `timeoutMs` on every `query` that names none: for a
 * component's own statements (the relay store's), so that none waits longer
 * on a silent server. Transactions, LISTEN and close are the connection's own.
 */
export function boundedConnection(connection: PostgresConnection, timeoutMs: number): PostgresConnection {
  const bounded: PostgresConnection = {
    query: (text, params, name, ms) => connection.query(text, params, name, ms ?? timeoutMs),
    transaction: (fn, ms) => connection.transaction(fn, ms),
    listen: (channel, onNotify) => connection.listen(channel, onNotify),
    close: () => connection.close(),
  };
  if (connection.replicationConfig) return { ...bounded, replicationConfig: () => connection.replicationConfig!() };
  return bounded;
}
