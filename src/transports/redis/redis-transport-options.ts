import type { ConnectionOptions } from 'node:tls';
import type { Redis } from 'ioredis';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';

/**
 * Options of `new RedisTransport(...)`. Give either `url` or `client`; every
 * other field has a default.
 *
 * @example
 * const options: RedisTransportOptions = { url: 'redis://:secret@redis.internal:6379/0', maxLen: 1_000_000 };
 */
export interface RedisTransportOptions {
  /**
   * Where Redis is: `redis://[user[:password]@]host[:port][/db]`, or
   * `rediss://...` for TLS. Port 6379 and db 0 by default. The password is
   * redacted in every message. Required unless `client` is given.
   */
  readonly url?: string;
  /**
   * An existing ioredis `Redis` instance (not a `Cluster`) to publish with
   * instead of `url`. The transport never closes it and does not change its
   * settings: give it `enableOfflineQueue: false` and `maxRetriesPerRequest: 0`
   * so that commands fail fast while it is disconnected (otherwise a call waits
   * up to `commandTimeoutMs`). Default: none.
   */
  readonly client?: Redis;
  /** The ACL user, overriding the url's. Default: the url's user, else `default`. */
  readonly username?: string;
  /** The password, overriding the url's (keeps it out of the url, e.g. from a secret store). Default: the url's password, else none. */
  readonly password?: string;
  /** The stream key of a destination not listed in `streams` is `streamPrefix + destination`. Default: `'txbox:'`. */
  readonly streamPrefix?: string;
  /** Stream keys for some destinations, e.g. `{ orders: 'shop:orders' }`. Default: none (all use `streamPrefix`). */
  readonly streams?: Readonly<Record<string, string>>;
  /**
   * Trims each stream to about this many entries on every XADD
   * (`MAXLEN ~ n`: whole radix-tree nodes only, cheap). Entries trimmed before
   * a consumer read them are gone: size it well above consumer lag.
   * Default: none (streams grow until consumers or an operator trim them).
   */
  readonly maxLen?: number;
  /**
   * Largest entry accepted, in bytes (field names and values, UTF-8), checked
   * before sending; larger events fail permanently. Redis's own limit is
   * 512 MB per value, far beyond what a stream should carry. Default: 1048576 (1 MiB).
   */
  readonly maxMessageBytes?: number;
  /** Longest wait for the replies of one publish call (one pipeline), in ms; then its events are retriable. Default: 5000. */
  readonly commandTimeoutMs?: number;
  /** Longest wait for the TCP (and TLS) connection at `start()` and on each reconnect, in ms. Default: 10000. */
  readonly connectTimeoutMs?: number;
  /** TLS options passed to `tls.connect` (`ca`, `cert`, `key`, `servername`, ...); setting it turns TLS on. `rediss://` turns it on with Node's defaults. Default: none. */
  readonly tls?: ConnectionOptions;
  /** Receives connection losses and recoveries of the transport's own client (address only, never credentials). Default: silent. */
  readonly logger?: Logger;
}

/** Connection settings after validation. Holds the password: do not log it. */
export type ResolvedRedisConnection =
  | {
      readonly kind: 'url';
      readonly host: string;
      readonly port: number;
      readonly db: number;
      readonly username: string | undefined;
      readonly password: string | undefined;
      readonly tls: Readonly<ConnectionOptions> | undefined;
      /** The address without credentials, for messages: `redis://host:6379/0`. */
      readonly display: string;
      /** The setting that carries the user and the password: `url`, `username` or `password`. */
      readonly userField: string;
      readonly passwordField: string;
    }
  | { readonly kind: 'client'; readonly client: Redis; readonly display: string };

/** RedisTransportOptions after `resolveRedisTransportOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedRedisTransportOptions {
  readonly connection: ResolvedRedisConnection;
  readonly streamPrefix: string;
  readonly streams: ReadonlyMap<string, string>;
  /** Null when streams are not trimmed. */
  readonly maxLen: number | null;
  readonly maxMessageBytes: number;
  readonly commandTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly logger: Logger;
}

const URL_EXAMPLE = 'write it as "redis://[user:password@]host[:port][/db]" or "rediss://..." for TLS';

/**
 * Validates RedisTransport options, fills defaults and freezes them. Throws
 * ConfigError naming the field (`url`, `streams.orders`, `maxLen`, ...) and
 * the fix; messages never quote the url or the password.
 *
 * @example
 * const resolved = resolveRedisTransportOptions({ url: 'redis://127.0.0.1:6379' });
 * resolved.streamPrefix; // 'txbox:'
 */
export function resolveRedisTransportOptions(options: RedisTransportOptions): ResolvedRedisTransportOptions {
  if (options === null || typeof options !== 'object') {
    throw new ConfigError('options', 'must be an object such as { url: "redis://127.0.0.1:6379" }');
  }
  const streamPrefix = options.streamPrefix ?? 'txbox:';
  if (typeof streamPrefix !== 'string') throw new ConfigError('streamPrefix', 'must be a string, e.g. "txbox:"');
  const logger = options.logger ?? silentLogger;
  if (typeof logger !== 'object' || logger === null || typeof logger.warn !== 'function') {
    throw new ConfigError('logger', 'must have debug, info, warn and error methods (a pino logger fits)');
  }
  return Object.freeze({
    connection: resolveConnection(options),
    streamPrefix,
    streams: resolveStreams(options.streams),
    maxLen: options.maxLen === undefined ? null : int('maxLen', options.maxLen, 0, 1, Number.MAX_SAFE_INTEGER),
    maxMessageBytes: int('maxMessageBytes', options.maxMessageBytes, 1_048_576, 64, 512 * 1024 * 1024),
    commandTimeoutMs: int('commandTimeoutMs', options.commandTimeoutMs, 5000, 1, 3_600_000),
    connectTimeoutMs: int('connectTimeoutMs', options.connectTimeoutMs, 10_000, 1, 3_600_000),
    logger,
  });
}

/** The stream key a destination's events are added to. */
export function streamKeyOf(options: ResolvedRedisTransportOptions, destination: string): string {
  return options.streams.get(destination) ?? options.streamPrefix + destination;
}

function resolveConnection(options: RedisTransportOptions): ResolvedRedisConnection {
  if (options.client !== undefined) {
    for (const field of ['url', 'username', 'password', 'tls', 'connectTimeoutMs'] as const) {
      if (options[field] !== undefined) throw new ConfigError(field, 'cannot be combined with client: configure the ioredis client itself');
    }
    const c = options.client as Partial<Redis> | null;
    if (c === null || typeof c !== 'object' || typeof c.pipeline !== 'function' || typeof c.ping !== 'function') {
      throw new ConfigError('client', 'must be an ioredis Redis instance (new Redis(...))');
    }
    if (c.isCluster === true) throw new ConfigError('client', 'is an ioredis Cluster; Redis Cluster is not supported yet, pass a Redis instance for a standalone or Sentinel-managed primary');
    const o = c.options;
    const display =
      Array.isArray(o?.sentinels) && o.sentinels.length > 0
        ? `sentinel primary ${JSON.stringify(o.name ?? 'mymaster')}`
        : `redis://${bracket(typeof o?.host === 'string' ? o.host : 'localhost')}:${typeof o?.port === 'number' ? o.port : 6379}`;
    return Object.freeze({ kind: 'client', client: options.client, display });
  }
  if (options.url === undefined) throw new ConfigError('url', `is required (or pass client): ${URL_EXAMPLE}`);
  let url: URL;
  try {
    if (typeof options.url !== 'string') throw new TypeError('not a string');
    url = new URL(options.url);
  } catch (err) {
    // The value is not quoted: it may hold the password.
    throw new ConfigError('url', `is not a valid URL; ${URL_EXAMPLE}`, { cause: err });
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') throw new ConfigError('url', `uses ${url.protocol} but only redis: and rediss: are supported; ${URL_EXAMPLE}`);
  if (url.hostname === '') throw new ConfigError('url', `has no host; ${URL_EXAMPLE}`);
  if (url.search !== '' || url.hash !== '') throw new ConfigError('url', 'must not have a query or fragment; use the transport options (tls, connectTimeoutMs, ...) instead');
  const dbText = url.pathname.replace(/^\//, '');
  if (!/^\d{0,5}$/.test(dbText)) throw new ConfigError('url', `has path ${JSON.stringify(url.pathname)}; the only path allowed is the database number, e.g. "/0"`);
  const db = dbText === '' ? 0 : Number(dbText);
  const port = url.port === '' ? 6379 : Number(url.port);
  for (const field of ['username', 'password'] as const) {
    if (options[field] !== undefined && typeof options[field] !== 'string') throw new ConfigError(field, 'must be a string');
  }
  const tls = options.tls ?? (url.protocol === 'rediss:' ? {} : undefined);
  if (tls !== undefined && (typeof tls !== 'object' || tls === null)) throw new ConfigError('tls', 'must be an object of TLS options (ca, cert, key, servername, ...)');
  const urlUser = url.username === '' ? undefined : decodeURIComponent(url.username);
  const urlPassword = url.password === '' ? undefined : decodeURIComponent(url.password);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return Object.freeze({
    kind: 'url',
    host,
    port,
    db,
    username: options.username ?? urlUser,
    password: options.password ?? urlPassword,
    tls: tls === undefined ? undefined : Object.freeze({ ...tls }),
    display: `${tls === undefined ? 'redis' : 'rediss'}://${bracket(host)}:${port}/${db}`,
    userField: options.username !== undefined ? 'username' : 'url',
    passwordField: options.password !== undefined ? 'password' : 'url',
  });
}

function resolveStreams(streams: RedisTransportOptions['streams']): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (streams === undefined) return map;
  if (streams === null || typeof streams !== 'object' || Array.isArray(streams)) {
    throw new ConfigError('streams', 'must be an object of destination names to stream keys, e.g. { orders: "shop:orders" }');
  }
  for (const [destination, key] of Object.entries(streams)) {
    if (typeof key !== 'string' || key.length === 0) throw new ConfigError(`streams.${destination}`, 'must be a non-empty stream key, e.g. "shop:orders"');
    map.set(destination, key);
  }
  return map;
}

function bracket(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
