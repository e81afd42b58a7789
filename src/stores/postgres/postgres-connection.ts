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
   */
  query<R = Record<string, unknown>>(text: string, params?: unknown[], name?: string): Promise<{ rows: R[] }>;
  /** Runs `fn` in a transaction on one connection; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T>;
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
