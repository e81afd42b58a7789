import { hostname } from 'node:os';
import type { ConnectionOptions } from 'node:tls';
import type { Redis } from 'ioredis';
import { ConfigError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int, pick } from '../../inbox/consumer/consumer-options.ts';
import { resolveRedisTransportOptions, type ResolvedRedisConnection, type ResolvedRedisTransportOptions } from './redis-transport-options.ts';

/**
 * Options of `new RedisConsumer(...)`. Give `url` or `client`, `streams`,
 * `group`, and exactly one of `inbox` or `queue`; every other field has a default.
 *
 * @example
 * const options: RedisConsumerOptions = { url: 'redis://127.0.0.1:6379', streams: { orders: 'txbox:orders' }, group: 'billing', inbox };
 */
export interface RedisConsumerOptions {
  /** Where Redis is, as for RedisTransport: `redis://[user[:password]@]host[:port][/db]` or `rediss://...`. Required unless `client` is given. */
  readonly url?: string;
  /**
   * An existing ioredis `Redis` instance (not a `Cluster`) for acks, claims and
   * dead letters. The consumer never closes it; blocking reads go over
   * `client.duplicate()`, a connection of the consumer's own. Default: none.
   */
  readonly client?: Redis;
  /** The ACL user, overriding the url's. It needs +xreadgroup +xack +xautoclaim +xclaim +xpending +xgroup +xadd (dead letters) +ping, and +client for a prompt stop. */
  readonly username?: string;
  /** The password, overriding the url's. */
  readonly password?: string;
  /** TLS options for `tls.connect`; setting it turns TLS on. Default: none (`rediss://` turns it on). */
  readonly tls?: ConnectionOptions;
  /**
   * The streams to read: `{ orders: 'txbox:orders' }` (destination -> stream
   * key), or stream keys directly (`['txbox:orders']`), whose destination is
   * the key without `streamPrefix`. Required.
   */
  readonly streams: Readonly<Record<string, string>> | readonly string[];
  /** Stripped from stream keys given as a list to name their destination. Default: `'txbox:'`. */
  readonly streamPrefix?: string;
  /** The consumer group, one per consuming service (e.g. the inbox's consumer name). Created with MKSTREAM when missing. Required. */
  readonly group: string;
  /** This process's name in the group. Give a stable name only if a restart should pick up its own pending entries at once. Default: `<hostname>-<pid>`. */
  readonly consumer?: string;
  /**
   * Where a new group starts (only when `start()` creates it): `'0'` reads
   * everything the stream still holds, `'$'` only entries added afterwards.
   * Default: `'0'`, so events published before the consumer's first start are not missed.
   */
  readonly startId?: string;
  /** Longest wait of one XREADGROUP for new entries, in ms. Default: 5000. */
  readonly blockMs?: number;
  /** Entries per XREADGROUP (and per XAUTOCLAIM); also how many may wait in the consumer beyond `concurrency`. Default: 100. */
  readonly count?: number;
  /**
   * Handlers running at once (different keys; one key runs one at a time).
   * The inbox commits events handed to it together in one transaction: for
   * throughput, use at least its `batch.maxSize × batch.concurrency` (128 by
   * default). Default: 128.
   */
  readonly concurrency?: number;
  /** An entry pending this long (ms) without an ack is taken over from a consumer presumed dead (XAUTOCLAIM); each consumer refreshes its own every third of it. At least 30. Default: 30000. */
  readonly claimIdleMs?: number;
  /** A reclaimed entry delivered more than this many times (its consumers crashed while handling it) is dead-lettered without running the handler. Default: 10. */
  readonly maxDeliveries?: number;
  /** Where dead and unreadable entries go: a stream key, or a function of the source stream key. Default: `<stream>:dead`. */
  readonly deadLetterStream?: string | ((stream: string) => string);
  /** Longest wait in `stop()` for handlers in progress, in ms; entries not finished by then stay pending for redelivery. Default: 30000. */
  readonly stopTimeoutMs?: number;
  /** Longest wait for the reply of one non-blocking command (XACK, XAUTOCLAIM, ...), in ms. Default: 5000. */
  readonly commandTimeoutMs?: number;
  /** Longest wait for the TCP (and TLS) connection, at `start()` and on each reconnect, in ms. Default: 10000. */
  readonly connectTimeoutMs?: number;
  /** Handles each event at once: the entry is acked after the handler's transaction committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: stores each read batch in the inbox queue and acks; inbox workers run the handlers. Give this or `inbox`. */
  readonly queue?: InboxQueue;
  /** Receives connection losses, unreadable entries and dead letters (stream ids, event ids and types; never payloads or credentials). Default: silent. */
  readonly logger?: Logger;
}

/** One stream the consumer reads. */
export interface ConsumerStream {
  readonly key: string;
  readonly destination: string;
  readonly deadLetter: string;
  /** The setting that names it, for messages: `streams.orders` or `streams[0]`. */
  readonly field: string;
}

/** RedisConsumerOptions after `resolveRedisConsumerOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedRedisConsumerOptions {
  readonly connection: ResolvedRedisConnection;
  /** The connection settings in the transport's shape, for its client factory. */
  readonly transport: ResolvedRedisTransportOptions;
  readonly streams: readonly ConsumerStream[];
  readonly group: string;
  readonly consumer: string;
  readonly startId: string;
  readonly blockMs: number;
  readonly count: number;
  readonly concurrency: number;
  readonly claimIdleMs: number;
  /** How often pending entries are reclaimed and in-flight ones kept fresh: a third of claimIdleMs (10 ms at least), so that an entry whose handler runs never looks idle for claimIdleMs. */
  readonly claimIntervalMs: number;
  readonly maxDeliveries: number;
  readonly stopTimeoutMs: number;
  readonly commandTimeoutMs: number;
  readonly handler: { readonly kind: 'inbox'; readonly inbox: InboxProcessor } | { readonly kind: 'queue'; readonly queue: InboxQueue };
  readonly logger: Logger;
}

/**
 * Validates RedisConsumer options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix; never quotes the url.
 *
 * @example
 * resolveRedisConsumerOptions({ url: 'redis://127.0.0.1:6379', streams: ['txbox:orders'], group: 'billing', inbox }).streams[0].destination; // 'orders'
 */
export function resolveRedisConsumerOptions(options: RedisConsumerOptions): ResolvedRedisConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { url, streams, group, inbox }');
  const { inbox, queue } = options;
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  if (inbox && typeof inbox.process !== 'function') throw new ConfigError('inbox', 'must be an Inbox (createInbox(...))');
  if (queue && typeof queue.receive !== 'function') throw new ConfigError('queue', 'must be an InboxQueue');
  const commandTimeoutMs = int('commandTimeoutMs', options.commandTimeoutMs, 5000, 1, 3_600_000);
  // The transport's resolver checks url, client, username, password, tls, connectTimeoutMs and logger the same way.
  const transport = resolveRedisTransportOptions({
    ...pick(options, ['url', 'client', 'username', 'password', 'tls', 'connectTimeoutMs', 'logger']),
    commandTimeoutMs,
  });
  const streamPrefix = options.streamPrefix ?? 'txbox:';
  if (typeof streamPrefix !== 'string') throw new ConfigError('streamPrefix', 'must be a string, e.g. "txbox:"');
  const group = name('group', options.group, undefined);
  const consumer = name('consumer', options.consumer, `${hostname()}-${process.pid}`);
  const startId = options.startId ?? '0';
  if (typeof startId !== 'string' || !/^(\$|\d+(-\d+)?)$/.test(startId)) throw new ConfigError('startId', 'must be "0" (the whole stream), "$" (new entries only) or an entry id such as "1718000000000-0"');
  const claimIdleMs = int('claimIdleMs', options.claimIdleMs, 30_000, 30, 86_400_000);
  const dead = options.deadLetterStream;
  if (dead !== undefined && typeof dead !== 'function' && (typeof dead !== 'string' || dead === '')) {
    throw new ConfigError('deadLetterStream', 'must be a stream key or a function of the source stream key');
  }
  const streams = resolveStreams(options.streams, streamPrefix).map((s) => {
    const deadLetter = dead === undefined ? `${s.key}:dead` : typeof dead === 'string' ? dead : dead(s.key);
    if (typeof deadLetter !== 'string' || deadLetter === '') throw new ConfigError('deadLetterStream', `returned no stream key for ${JSON.stringify(s.key)}`);
    if (deadLetter === s.key) throw new ConfigError('deadLetterStream', `must differ from the stream it serves (${JSON.stringify(s.key)})`);
    return Object.freeze({ ...s, deadLetter });
  });
  return Object.freeze({
    connection: transport.connection,
    transport,
    streams: Object.freeze(streams),
    group,
    consumer,
    startId,
    blockMs: int('blockMs', options.blockMs, 5000, 1, 3_600_000),
    count: int('count', options.count, 100, 1, 100_000),
    concurrency: int('concurrency', options.concurrency, 128, 1, 10_000),
    claimIdleMs,
    claimIntervalMs: Math.floor(claimIdleMs / 3), // 10 ms at least: claimIdleMs is at least 30
    maxDeliveries: int('maxDeliveries', options.maxDeliveries, 10, 1, 1_000_000),
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
    commandTimeoutMs,
    handler: inbox ? Object.freeze({ kind: 'inbox' as const, inbox }) : Object.freeze({ kind: 'queue' as const, queue: queue! }),
    logger: transport.logger,
  });
}

function resolveStreams(streams: RedisConsumerOptions['streams'], prefix: string): { key: string; destination: string; field: string }[] {
  const example = 'e.g. { orders: "txbox:orders" } or ["txbox:orders"]';
  if (streams === null || typeof streams !== 'object') throw new ConfigError('streams', `is required: the streams to read, ${example}`);
  const list = Array.isArray(streams)
    ? (streams as readonly unknown[]).map((key, i) => {
        if (typeof key !== 'string' || key === '') throw new ConfigError(`streams[${i}]`, 'must be a non-empty stream key');
        return { key, destination: prefix !== '' && key.startsWith(prefix) ? key.slice(prefix.length) : key, field: `streams[${i}]` };
      })
    : Object.entries(streams as Readonly<Record<string, unknown>>).map(([destination, key]) => {
        if (typeof key !== 'string' || key === '') throw new ConfigError(`streams.${destination}`, 'must be a non-empty stream key, e.g. "txbox:orders"');
        return { key, destination, field: `streams.${destination}` };
      });
  if (list.length === 0) throw new ConfigError('streams', `names no stream: ${example}`);
  const seen = new Set<string>();
  for (const s of list) {
    if (seen.has(s.key)) throw new ConfigError('streams', `lists stream ${JSON.stringify(s.key)} twice`);
    seen.add(s.key);
  }
  return list;
}

function name(field: string, value: unknown, fallback: string | undefined): string {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || !/^\S{1,200}$/.test(value)) throw new ConfigError(field, `${fallback === undefined ? 'is required: ' : 'must be '}1-200 characters without spaces, e.g. "billing"`);
  return value;
}
