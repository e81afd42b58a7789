import pg from 'pg';
import { abandonsConnection, ConfigError, QueryTimeoutError, TransactionRolledBackError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { millisOption } from '../../core/duration.ts';
import { silentLogger } from '../../core/logger.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { preparedParams, relayTypes } from './pg-values.ts';
import { destroySocket, endOrAbandon } from './pg-sockets.ts';

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
  /**
   * When txbox opens the pool: how long getting a connection may take (a new
   * one's connect and login, or the wait for a free one), after which the
   * statement fails and a connect still pending is destroyed, so that a
   * server gone silent cannot hold the pool's slots. With `pool`, set pg's
   * `connectionTimeoutMillis` (and `keepAlive`) on it yourself. Default: 15000 ms.
   */
  readonly connectTimeoutMs?: number;
  /**
   * How often the LISTEN connection (the relay's wake-up by NOTIFY) checks
   * that its server still answers (a `SELECT 1`, given at most 10 s): it only
   * receives, so a server gone silent would leave it deaf, and the relay
   * waking by polls only. Default: 15000 ms.
   */
  readonly listenPingMs?: number;
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
  const pingEveryMs = millisOption('listenPingMs', options.listenPingMs, 15_000, 100);
  const pingTimeoutMs = Math.min(LISTEN_PING_TIMEOUT_MS, pingEveryMs);
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
    // pg lets the URL's own parameters (application_name among them) override these. TCP keepalive
    // finds an idle connection whose server is gone (it would not know until it sent something).
    pool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.maxConnections ?? 4,
      application_name: applicationName(options.applicationName),
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
      connectionTimeoutMillis: millisOption('connectTimeoutMs', options.connectTimeoutMs, 15_000, 100),
    });
    owned = true;
  } else {
    throw new ConfigError('databaseUrl', 'is required: pass a pg Pool or a connection string (TXBOX_DATABASE_URL for the CLI)');
  }
  // An idle client that loses its server emits on the pool; without a handler the process would crash.
  pool.on('error', (err) => logger.warn({ err: err.message }, 'txbox: idle database connection failed'));
  // A client whose statement timed out still waits for that answer (pg queues the next statements
  // behind it): the pool drops it (pool.query releases it with the error) and its socket is destroyed
  // now, not when TCP gives up on a silent server.
  pool.on('release', (err: Error | undefined, client: pg.PoolClient) => {
    if (err !== undefined && (isReadTimeout(err) || abandonsConnection(err))) destroySocket(client);
  });
  const listeners = new Set<pg.Client>();
  /** LISTEN clients still connecting: a stop destroys their sockets (end() would wait for a server that may never answer). */
  const connecting = new Set<pg.Client>();

  // Array parameters go as the text pg would build for them (cheaper, the same bytes). On a pool
  // txbox opened, rows are read with pg's parsers but an empty text[] without the array parser;
  // a pool of yours keeps its own parsers (its clients may have set some).
  const types = owned ? relayTypes() : undefined;
  return {
    query: async <R>(text: string, params?: unknown[], name?: string, timeoutMs?: number) => {
      const values = params === undefined ? [] : preparedParams(params);
      const config: pg.QueryConfig & { query_timeout?: number } = name === undefined ? { text, values } : { name, text, values };
      if (types !== undefined) config.types = types as pg.CustomTypesConfig;
      if (timeoutMs === undefined) return (await pool.query(config)) as unknown as { rows: R[] };
      // pg's read timeout: its client is released with the error, so the pool drops it (above).
      config.query_timeout = timeoutMs;
      try {
        return (await pool.query(config)) as unknown as { rows: R[] };
      } catch (err) {
        if (isReadTimeout(err)) throw new QueryTimeoutError(timeoutMs);
        throw err;
      }
    },
    async transaction(fn, timeoutMs) {
      const client = await pool.connect();
      let discard: Error | undefined;
      // The whole transaction's bound: a server gone silent would hold it until TCP gives up. The socket is
      // destroyed, so every statement waiting on it fails at once; the server rolls back what did not commit.
      let timedOut = false;
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              timedOut = true;
              destroySocket(client);
            }, timeoutMs);
      // A checked-out client's connection error is emitted on it (not the pool): the statement waiting fails
      // with it too; without a listener the event would crash the process.
      const onError = (): void => {};
      client.on('error', onError);
      try {
        await client.query('BEGIN');
        const result = await fn(client);
        // A statement that failed inside and was caught leaves the transaction aborted: PostgreSQL then
        // answers COMMIT with ROLLBACK, and no error. Nothing was committed; say so.
        const commit = await client.query('COMMIT');
        if (commit.command === 'ROLLBACK') throw new TransactionRolledBackError();
        // COMMIT answered as the timer fired: committed, but the socket is gone.
        if (timedOut) discard = new QueryTimeoutError(timeoutMs!);
        return result;
      } catch (err) {
        if (timedOut) {
          discard = new QueryTimeoutError(timeoutMs!);
          throw discard;
        }
        // Code still running may use this client (an abandoned handler): destroyed, never pooled
        // again; the server rolls the transaction back when the connection closes.
        // A statement that timed out holds the client too: pg queues the ROLLBACK behind its answer.
        if (abandonsConnection(err) || isReadTimeout(err)) discard = err as Error;
        else await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        clearTimeout(timer);
        client.off('error', onError);
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
        // A LISTEN connection only receives: a server gone silent would leave it deaf for good
        // (notifications lost, the relay waiting for polls). A ping now and then finds out.
        const ping = setInterval(() => {
          if (c !== client) return;
          c.query({ text: 'SELECT 1', query_timeout: pingTimeoutMs } as pg.QueryConfig).catch((err: Error) => {
            if (c !== client) return;
            client = undefined;
            listeners.delete(c);
            abandon(c);
            logger.warn({ err: err.message }, 'txbox: LISTEN connection does not answer; polling until it is back');
            schedule(1000);
          });
        }, pingEveryMs);
        ping.unref();
        c.once('end', () => clearInterval(ping));
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
          clearInterval(ping);
          abandon(c);
          throw err;
        } finally {
          connecting.delete(c);
          if (attempt === c) attempt = undefined;
        }
        if (stopped) {
          clearInterval(ping);
          await endOrAbandon(c);
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
          await endOrAbandon(client);
        }
      };
    },
    async close() {
      for (const c of connecting) abandon(c);
      for (const c of listeners) await endOrAbandon(c);
      listeners.clear();
      if (owned) await pool.end();
    },
  };
}

/** How long an idle connection txbox opened waits before TCP keepalive probes start. */
const KEEPALIVE_IDLE_MS = 10_000;
const LISTEN_PING_TIMEOUT_MS = 10_000;

/** pg's own error when a statement with `query_timeout` gets no answer in time. */
function isReadTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === 'Query read timeout';
}

/**
 * Gives up a client that may still be connecting: its socket is destroyed at
 * once. `end()` alone would half-close it and wait for the server's answer,
 * which a server that stopped answering never sends (and pg's `connect()`
 * never settles after an `end()`: nothing may wait for it).
 */
function abandon(c: pg.Client): void {
  c.end().catch(() => {});
  destroySocket(c);
}
