import pg from 'pg';
import { abandonsConnection, ConfigError, TransactionRolledBackError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { silentLogger } from '../../core/logger.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { preparedParams, relayTypes } from './pg-values.ts';

export interface PgConnectionOptions {
  /** A `pg` Pool to use; txbox does not end it. Give this or `connectionString`. */
  readonly pool?: pg.Pool;
  /** A PostgreSQL URL; txbox opens and closes its own pool. */
  readonly connectionString?: string;
  /** Pool size when txbox opens the pool. Default: 4. */
  readonly maxConnections?: number;
  /**
   * The `application_name` of the connections txbox opens, so that an
   * operator finds them in `pg_stat_activity` (e.g. `txbox relay <relay id>`,
   * `txbox consumer <name>`). An `application_name` parameter in
   * `connectionString` wins. Not used with `pool` (set it on your pool).
   * Longer than 63 characters is cut to 63, as PostgreSQL would. Default: `txbox`.
   */
  readonly applicationName?: string;
  readonly logger?: Logger;
}

/** PostgreSQL keeps at most 63 bytes of application_name and turns non-ASCII bytes into '?'. */
function applicationName(name: string | undefined): string {
  if (name === undefined) return 'txbox';
  if (typeof name !== 'string' || !/^[\x20-\x7e]{1,}$/.test(name)) {
    throw new ConfigError('applicationName', 'must be printable ASCII text, e.g. "txbox relay relay-1"');
  }
  return name.slice(0, 63);
}

/** Builds a PostgresConnection over a `pg` Pool (yours or one txbox opens). */
export function pgConnection(options: PgConnectionOptions): PostgresConnection {
  const logger = options.logger ?? silentLogger;
  let owned = false;
  let pool: pg.Pool;
  if (options.pool) {
    pool = options.pool;
  } else if (options.connectionString) {
    let valid = /^postgres(ql)?:\/\//.test(options.connectionString);
    try {
      new URL(options.connectionString);
    } catch {
      valid = false;
    }
    if (!valid) throw new ConfigError('databaseUrl', 'must be a postgres:// or postgresql:// URL, e.g. postgres://user@127.0.0.1:5432/app');
    // pg lets the URL's own parameters (application_name among them) override these.
    pool = new pg.Pool({ connectionString: options.connectionString, max: options.maxConnections ?? 4, application_name: applicationName(options.applicationName) });
    owned = true;
  } else {
    throw new ConfigError('databaseUrl', 'is required: pass a pg Pool or a connection string (TXBOX_DATABASE_URL for the CLI)');
  }
  // An idle client that loses its server emits on the pool; without a handler the process would crash.
  pool.on('error', (err) => logger.warn({ err: err.message }, 'txbox: idle database connection failed'));
  const listeners = new Set<pg.Client>();
  /** LISTEN clients still connecting: a stop destroys their sockets (end() would wait for a server that may never answer). */
  const connecting = new Set<pg.Client>();

  // Array parameters go as the text pg would build for them (cheaper, the same bytes). On a pool
  // txbox opened, rows are read with pg's parsers but an empty text[] without the array parser;
  // a pool of yours keeps its own parsers (its clients may have set some).
  const types = owned ? relayTypes() : undefined;
  return {
    query: async <R>(text: string, params?: unknown[], name?: string) => {
      const values = params === undefined ? [] : preparedParams(params);
      const config: pg.QueryConfig = name === undefined ? { text, values } : { name, text, values };
      if (types !== undefined) config.types = types as pg.CustomTypesConfig;
      return (await pool.query(config)) as unknown as { rows: R[] };
    },
    async transaction(fn) {
      const client = await pool.connect();
      let discard: Error | undefined;
      try {
        await client.query('BEGIN');
        const result = await fn(client);
        // A statement that failed inside and was caught leaves the transaction aborted: PostgreSQL then
        // answers COMMIT with ROLLBACK, and no error. Nothing was committed; say so.
        const commit = await client.query('COMMIT');
        if (commit.command === 'ROLLBACK') throw new TransactionRolledBackError();
        return result;
      } catch (err) {
        // Code still running may use this client (an abandoned handler): destroyed, never pooled
        // again; the server rolls the transaction back when the connection closes.
        if (abandonsConnection(err)) discard = err as Error;
        else await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release(discard);
      }
    },
    replicationConfig: () => ({ ...pool.options }),
    async listen(channel, onNotify) {
      // A dedicated client: a pooled one would be handed to other queries. One attempt at a time: a
      // lost connection schedules one reconnect, a failed attempt the next. A stop ends the client
      // being connected too (its socket is destroyed; pg's connect() then never settles, and nothing
      // waits for it), and an attempt that completes after a stop ends its client at once.
      let client: pg.Client | undefined;
      let stopped = false;
      let retry: NodeJS.Timeout | undefined;
      let attempt: pg.Client | undefined;
      const schedule = (ms: number): void => {
        if (stopped || retry !== undefined || attempt !== undefined) return;
        retry = setTimeout(() => {
          retry = undefined;
          reconnect();
        }, ms);
      };
      const connect = async (): Promise<void> => {
        const c = new pg.Client(pool.options);
        attempt = c;
        connecting.add(c);
        c.on('notification', () => onNotify());
        c.on('error', (err) => {
          listeners.delete(c);
          c.end().catch(() => {});
          if (c !== client) return; // an attempt's failure: its connect() rejects, and reconnect() retries
          client = undefined;
          logger.warn({ err: err.message }, 'txbox: LISTEN connection lost; polling until it is back');
          schedule(1000);
        });
        try {
          await c.connect();
          await c.query(`LISTEN "${channel}"`);
        } catch (err) {
          abandon(c);
          throw err;
        } finally {
          connecting.delete(c);
          if (attempt === c) attempt = undefined;
        }
        if (stopped) {
          await c.end().catch(() => {});
          return;
        }
        listeners.add(c);
        client = c;
        onNotify(); // catch up on anything committed while not listening
      };
      const reconnect = (): void => {
        connect().catch((err: Error) => {
          logger.warn({ err: err.message }, 'txbox: LISTEN reconnect failed; will retry');
          schedule(2000);
        });
      };
      await connect();
      return async () => {
        stopped = true;
        clearTimeout(retry);
        if (attempt) abandon(attempt);
        if (client) {
          listeners.delete(client);
          await client.end().catch(() => {});
        }
      };
    },
    async close() {
      for (const c of connecting) abandon(c);
      for (const c of listeners) await c.end().catch(() => {});
      listeners.clear();
      if (owned) await pool.end();
    },
  };
}

/**
 * Gives up a client that may still be connecting: its socket is destroyed at
 * once. `end()` alone would half-close it and wait for the server's answer,
 * which a server that stopped answering never sends (and pg's `connect()`
 * never settles after an `end()`: nothing may wait for it).
 */
function abandon(c: pg.Client): void {
  c.end().catch(() => {});
  (c as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream?.destroy?.();
}
