/**
 * The transport's ioredis client: how it is configured (fail fast while
 * disconnected, reconnect by itself) and how start() connects and checks it.
 */
import { Redis } from 'ioredis';
import { AbortedError, type TxboxError } from '../../core/errors.ts';
import { passwordNotNeeded, replyCode, startFailure, type StartContext } from './redis-outcomes.ts';
import type { ResolvedRedisConnection, ResolvedRedisTransportOptions } from './redis-transport-options.ts';

/** Reconnect delays: 100, 200, 400 ... ms, capped at 2 s so that a restarted Redis is found again quickly. */
const RECONNECT_CAP_MS = 2000;

/**
 * A client that never queues or re-sends commands: while disconnected a
 * command fails at once (`enableOfflineQueue: false`), and commands in flight
 * when the connection drops fail at once (`maxRetriesPerRequest: 0`), so every
 * publish call ends quickly in retriable outcomes and the relay decides when
 * to retry. The connection itself is re-established in the background.
 */
export function createClient(c: Extract<ResolvedRedisConnection, { kind: 'url' }>, o: ResolvedRedisTransportOptions): Redis {
  return new Redis({
    host: c.host,
    port: c.port,
    db: c.db,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    commandTimeout: o.commandTimeoutMs,
    connectTimeout: o.connectTimeoutMs,
    connectionName: 'txbox',
    retryStrategy: (times) => Math.min(RECONNECT_CAP_MS, 50 * 2 ** Math.min(times, 6)) + Math.floor(Math.random() * 50),
    // After a failover the old primary answers READONLY: reconnecting lets DNS or a proxy lead to the new one.
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 1 : false),
    ...(c.username !== undefined ? { username: c.username } : {}),
    ...(c.password !== undefined ? { password: c.password } : {}),
    ...(c.tls !== undefined ? { tls: { ...c.tls } } : {}),
  });
}

/**
 * Connects `client` if needed and checks it with PING; for a password given
 * to the default user, also checks that the server wants one. On failure the
 * transport's own client is disconnected (it would otherwise keep
 * reconnecting) and the error names the setting to fix.
 */
export async function connectAndVerify(client: Redis, owned: boolean, ctx: StartContext & { readonly password: string | undefined }, timeoutMs: number, signal: AbortSignal): Promise<void> {
  let lastError: unknown;
  const onError = (err: unknown): void => {
    lastError = err;
  };
  const onAbort = (): void => {
    if (owned) client.disconnect();
  };
  client.on('error', onError);
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    if (client.status === 'wait' || (owned && client.status === 'end')) await client.connect();
    else if (client.status !== 'ready') await waitReady(client, timeoutMs);
    await client.ping();
    if (owned && ctx.password !== undefined && (ctx.username === undefined || ctx.username === 'default')) {
      // HELLO ... AUTH default <password> succeeds on a server without a password; the one-argument AUTH does not.
      const refused = await client.call('AUTH', ctx.password).then(
        () => null,
        (err: unknown) => err,
      );
      if (refused !== null && /without any password configured|no password is set/i.test(String((refused as Error).message))) throw passwordNotNeeded(ctx);
      if (refused !== null) throw refused;
    }
  } catch (err) {
    if (owned) client.disconnect();
    if (signal.aborted) throw new AbortedError('RedisTransport.start() was aborted');
    if ((err as TxboxError).code === 'TXBOX_CONFIG') throw err;
    // A server that accepts the connection but never answers (a host gone behind a proxy or load
    // balancer, a hung server): an outage that waiting heals, like a connect timeout, not a setting to fix.
    // connect() rejects with a bare "Connection is closed."; the reason came through the error event.
    const why = replyCode(err) !== null ? err : (lastError ?? err);
    if (why instanceof Error && why.message === 'Command timed out') throw startFailure(Object.assign(new Error('ETIMEDOUT: the server accepted the connection but did not answer within commandTimeoutMs'), { code: 'ETIMEDOUT' }), ctx);
    throw startFailure(why, ctx);
  } finally {
    client.off('error', onError);
    signal.removeEventListener('abort', onAbort);
  }
}

/** For a client the caller handed over while it is (re)connecting. */
function waitReady(client: Redis, timeoutMs: number): Promise<void> {
  if (client.status === 'end' || client.status === 'close') {
    return Promise.reject(new Error(`the ioredis client is closed (status ${client.status}); pass an open client`));
  }
  return new Promise<void>((resolve, reject) => {
    const done = (err?: Error): void => {
      clearTimeout(timer);
      client.off('ready', onReady);
      client.off('end', onEnd);
      if (err) reject(err);
      else resolve();
    };
    const onReady = (): void => done();
    const onEnd = (): void => done(new Error('the ioredis client was closed while connecting'));
    const timer = setTimeout(() => done(Object.assign(new Error(`not ready within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })), timeoutMs);
    client.once('ready', onReady);
    client.once('end', onEnd);
  });
}
