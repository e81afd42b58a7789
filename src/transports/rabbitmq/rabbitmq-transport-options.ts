import type { SocketOptions } from 'amqplib';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';
import { redactAmqpUrl } from './rabbitmq-outcomes.ts';

/** Where one destination's events go. */
export interface RabbitMqDestination {
  /** The exchange to publish to. Default: the transport's `exchange` option. */
  readonly exchange?: string;
  /**
   * The routing key: a string, or a function of the event (e.g. `(e) => e.type`
   * for a topic exchange). Default: the destination name.
   */
  readonly routingKey?: string | ((event: OutboxEvent) => string);
}

/** The exchange type used when `assertExchanges` declares an exchange. */
export type RabbitMqExchangeType = 'direct' | 'topic' | 'fanout' | 'headers';

/**
 * Socket and TLS options passed to amqplib as they are: `ca`, `cert`, `key`,
 * `rejectUnauthorized`, `servername` for `amqps:` URLs, `keepAlive`,
 * `noDelay`, `credentials` (e.g. `amqplib.credentials.external()` for
 * client-certificate login), `clientProperties`.
 */
export type RabbitMqSocketOptions = SocketOptions;

/**
 * Options of `new RabbitMqTransport(...)`; every field but `url` has a default.
 *
 * @example
 * const options: RabbitMqTransportOptions = {
 *   url: 'amqp://relay:secret@rabbit.internal:5672/orders',
 *   exchange: 'orders',
 *   destinations: { payments: { exchange: 'payments', routingKey: (e) => e.type } },
 * };
 */
export interface RabbitMqTransportOptions {
  /**
   * The broker: `amqp://user:password@host:port/vhost` or `amqps://...` for
   * TLS. Required. Query parameters (`frameMax`, `channelMax`, `locale`) are
   * passed to amqplib. Userinfo and query are redacted in every message.
   */
  readonly url: string | URL;
  /**
   * The exchange for destinations not listed in `destinations`. Default: `''`,
   * RabbitMQ's default exchange, which routes a message to the queue named
   * by its routing key (so by default a destination is a queue name).
   */
  readonly exchange?: string;
  /** Per destination exchange and routing key. Unlisted destinations use `exchange` and routing key = destination. Default: none. */
  readonly destinations?: Readonly<Record<string, RabbitMqDestination>>;
  /**
   * Declare every exchange named in `exchange` and `destinations` at
   * `start()` (durable, of type `exchangeType`), so a missing exchange does
   * not park events. An existing exchange of another type makes `start()`
   * fail. The default exchange `''` and `amq.*` exchanges are never declared.
   * Default: false (the topology is owned by the consumers or by ops).
   */
  readonly assertExchanges?: boolean;
  /** The type of exchanges declared by `assertExchanges`. Default: `'topic'`. */
  readonly exchangeType?: RabbitMqExchangeType;
  /**
   * The largest message body sent, in bytes; a larger event is parked at once
   * (permanent) without being sent. Match the broker's `max_message_size`
   * (RabbitMQ 4.x default 16 MiB; 3.8 to 3.13 default 128 MiB; hard cap
   * 512 MiB). A broker rejection of a larger body is handled too. Default:
   * 16777216 (16 MiB).
   */
  readonly maxMessageBytes?: number;
  /**
   * Longest wait for the publisher confirms of one `publish()` call, in ms;
   * events still unconfirmed then count as retriable (they may still arrive:
   * at-least-once). Keep it below the relay's `publishTimeoutMs` (28000 with the default `leaseTtlMs`).
   * Default: 15000.
   */
  readonly confirmTimeoutMs?: number;
  /** Longest time for the TCP/TLS connect and AMQP handshake, in ms. Default: 10000. */
  readonly connectTimeoutMs?: number;
  /**
   * AMQP heartbeat interval in seconds; a broker that stays silent for two
   * intervals is taken as gone and the transport reconnects. 0 disables
   * heartbeats. Default: 15.
   */
  readonly heartbeatSeconds?: number;
  /** First delay before reconnecting after the connection dropped, in ms; doubled per failed attempt, with jitter. Default: 200. */
  readonly reconnectInitialDelayMs?: number;
  /** Longest delay between reconnect attempts, in ms. Default: 10000. */
  readonly reconnectMaxDelayMs?: number;
  /**
   * Confirm channels that publish calls are spread over (round robin). A
   * channel closed by an error affects only the messages in flight on it.
   * Default: 1.
   */
  readonly channels?: number;
  /** Shown as the connection name in the management UI and `rabbitmqctl list_connections`. Default: `'txbox'`. */
  readonly connectionName?: string;
  /** Socket and TLS options passed through to amqplib. Default: `{ noDelay: true, keepAlive: true }`. */
  readonly socket?: RabbitMqSocketOptions;
  /** Receives connection lifecycle logs (never credentials or payloads). Default: silent. */
  readonly logger?: Logger;
}

/** One destination, ready to publish to. */
export interface ResolvedRabbitMqDestination {
  readonly exchange: string;
  /** A fixed routing key, or null when `routingKeyOf` computes it per event. */
  readonly routingKey: string | null;
  readonly routingKeyOf: ((event: OutboxEvent) => string) | null;
}

/** RabbitMqTransportOptions after `resolveRabbitMqTransportOptions()`: checked, defaults filled, frozen. Holds credentials in `url`: do not log it. */
export interface ResolvedRabbitMqTransportOptions {
  readonly url: string;
  /** The URL without userinfo and query, for messages and logs. */
  readonly display: string;
  readonly exchange: string;
  readonly destinations: ReadonlyMap<string, ResolvedRabbitMqDestination>;
  readonly assertExchanges: boolean;
  readonly exchangeType: RabbitMqExchangeType;
  readonly maxMessageBytes: number;
  readonly confirmTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly heartbeatSeconds: number;
  readonly reconnectInitialDelayMs: number;
  readonly reconnectMaxDelayMs: number;
  readonly channels: number;
  readonly connectionName: string;
  readonly socket: Readonly<RabbitMqSocketOptions>;
  readonly logger: Logger;
}

/** RabbitMQ's hard limit on a message body (`max_message_size` cannot be set higher). */
export const RABBITMQ_MAX_MESSAGE_BYTES = 536_870_912;
const EXCHANGE_NAME = /^[A-Za-z0-9_.:-]*$/;
const EXCHANGE_TYPES: readonly string[] = ['direct', 'topic', 'fanout', 'headers'];

/**
 * Validates RabbitMqTransport options, fills defaults and freezes them.
 * Throws ConfigError naming the field (`url`, `destinations.orders.exchange`,
 * ...) and the fix; never quotes the URL.
 *
 * @example
 * const resolved = resolveRabbitMqTransportOptions({ url: 'amqp://127.0.0.1:5672', exchange: 'events' });
 */
export function resolveRabbitMqTransportOptions(options: RabbitMqTransportOptions): ResolvedRabbitMqTransportOptions {
  if (options === null || typeof options !== 'object') {
    throw new ConfigError('options', 'must be an object such as { url: "amqp://user:password@host:5672/vhost" }');
  }
  const heartbeatSeconds = int('heartbeatSeconds', options.heartbeatSeconds, 15, 0, 3600);
  const { url, display } = resolveUrl(options.url, heartbeatSeconds);
  const exchange = exchangeName('exchange', options.exchange ?? '');
  const exchangeType = options.exchangeType ?? 'topic';
  if (!EXCHANGE_TYPES.includes(exchangeType)) throw new ConfigError('exchangeType', `must be one of ${EXCHANGE_TYPES.join(', ')}`);
  const initialDelay = int('reconnectInitialDelayMs', options.reconnectInitialDelayMs, 200, 1, 600_000);
  const maxDelay = int('reconnectMaxDelayMs', options.reconnectMaxDelayMs, 10_000, 1, 3_600_000);
  if (maxDelay < initialDelay) throw new ConfigError('reconnectMaxDelayMs', `must be at least reconnectInitialDelayMs (${initialDelay})`);
  const connectionName = options.connectionName ?? 'txbox';
  if (typeof connectionName !== 'string' || connectionName.length === 0 || connectionName.length > 255) {
    throw new ConfigError('connectionName', 'must be a string of 1 to 255 characters');
  }
  const socket = options.socket ?? {};
  if (typeof socket !== 'object' || socket === null) {
    throw new ConfigError('socket', 'must be an object of socket and TLS options (ca, cert, key, rejectUnauthorized, keepAlive, ...)');
  }
  if (options.assertExchanges !== undefined && typeof options.assertExchanges !== 'boolean') throw new ConfigError('assertExchanges', 'must be true or false');
  const logger = options.logger ?? silentLogger;
  if (typeof logger?.warn !== 'function') throw new ConfigError('logger', 'must have debug, info, warn and error methods (a pino logger fits)');
  return Object.freeze({
    url,
    display,
    exchange,
    destinations: resolveDestinations(options.destinations, exchange),
    assertExchanges: options.assertExchanges ?? false,
    exchangeType,
    maxMessageBytes: int('maxMessageBytes', options.maxMessageBytes, 16 * 1024 * 1024, 1, RABBITMQ_MAX_MESSAGE_BYTES),
    confirmTimeoutMs: int('confirmTimeoutMs', options.confirmTimeoutMs, 15_000, 1, 3_600_000),
    connectTimeoutMs: int('connectTimeoutMs', options.connectTimeoutMs, 10_000, 1, 600_000),
    heartbeatSeconds,
    reconnectInitialDelayMs: initialDelay,
    reconnectMaxDelayMs: maxDelay,
    channels: int('channels', options.channels, 1, 1, 64),
    connectionName,
    socket: Object.freeze({ noDelay: true, keepAlive: true, ...socket }),
    logger,
  });
}

function resolveUrl(raw: string | URL | undefined, heartbeatSeconds: number): { url: string; display: string } {
  const example = 'write it as "amqp://user:password@host:5672/vhost" (or amqps:// for TLS)';
  if (raw === undefined) throw new ConfigError('url', `is required; ${example}`);
  let url: URL;
  try {
    if (typeof raw !== 'string' && !(raw instanceof URL)) throw new TypeError('not a string');
    url = new URL(String(raw));
  } catch (err) {
    // The value itself is not quoted: it may hold credentials.
    throw new ConfigError('url', `is not an absolute URL; ${example}`, { cause: err });
  }
  if (url.protocol !== 'amqp:' && url.protocol !== 'amqps:') throw new ConfigError('url', `uses ${url.protocol} but only amqp: and amqps: are supported; ${example}`);
  if (url.hostname === '') throw new ConfigError('url', `has no host name; ${example}`);
  if (url.searchParams.has('heartbeat')) throw new ConfigError('url', 'sets heartbeat in the query; use the heartbeatSeconds option instead');
  url.searchParams.set('heartbeat', String(heartbeatSeconds));
  return { url: url.href, display: redactAmqpUrl(url) };
}

function resolveDestinations(destinations: RabbitMqTransportOptions['destinations'], fallback: string): ReadonlyMap<string, ResolvedRabbitMqDestination> {
  const map = new Map<string, ResolvedRabbitMqDestination>();
  if (destinations === undefined) return map;
  if (destinations === null || typeof destinations !== 'object') {
    throw new ConfigError('destinations', 'must be an object such as { orders: { exchange: "orders", routingKey: "order.created" } }');
  }
  for (const [destination, d] of Object.entries(destinations)) {
    const field = `destinations.${destination}`;
    if (destination.length === 0) throw new ConfigError('destinations', 'has an empty destination name');
    if (d === null || typeof d !== 'object') throw new ConfigError(field, 'must be an object { exchange?, routingKey? }');
    const exchange = exchangeName(`${field}.exchange`, d.exchange ?? fallback);
    const rk = d.routingKey ?? destination;
    if (typeof rk === 'function') {
      map.set(destination, Object.freeze({ exchange, routingKey: null, routingKeyOf: rk }));
      continue;
    }
    const problem = routingKeyProblem(rk);
    if (problem) throw new ConfigError(`${field}.routingKey`, problem);
    map.set(destination, Object.freeze({ exchange, routingKey: rk, routingKeyOf: null }));
  }
  return map;
}

/** Why a routing key cannot be sent, or null. Also used for keys computed per event. */
export function routingKeyProblem(key: unknown): string | null {
  if (typeof key !== 'string') return 'must be a string or a function returning one';
  if (Buffer.byteLength(key) > 255) return 'is longer than 255 bytes (the AMQP limit for a routing key)';
  return null;
}

function exchangeName(field: string, name: unknown): string {
  if (typeof name !== 'string' || name.length > 255 || !EXCHANGE_NAME.test(name)) {
    throw new ConfigError(field, 'must be an exchange name of up to 255 letters, digits and - _ . : ("" is the default exchange)');
  }
  return name;
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
