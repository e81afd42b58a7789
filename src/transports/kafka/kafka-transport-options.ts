import type { ConnectionOptions } from 'node:tls';
import type { Kafka, SASLOptions } from 'kafkajs';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';
import { codecRegistered, type KafkaCompression } from './kafka-client.ts';

/**
 * Options of `new KafkaTransport(...)`; every field has a default, so `{}`
 * publishes to a local broker at 127.0.0.1:9092, one topic per destination.
 *
 * @example
 * const options: KafkaTransportOptions = {
 *   brokers: ['kafka-1.internal:9093', 'kafka-2.internal:9093'],
 *   ssl: true,
 *   sasl: { mechanism: 'scram-sha-512', username: 'relay', password: process.env.KAFKA_PASSWORD! },
 *   topicPrefix: 'shop.',
 * };
 */
export interface KafkaTransportOptions {
  /** Bootstrap brokers as `host:port` (IPv6 as `[::1]:9092`). Default: `['127.0.0.1:9092']`. */
  readonly brokers?: readonly string[];
  /** The client id the brokers see in their logs, quotas and ACLs. Default: `'txbox'`. */
  readonly clientId?: string;
  /** TLS: `true` for Node's defaults, or `tls.connect` options (`ca`, `cert`, `key`, `servername`, ...). Passed to kafkajs as is. Default: none (plaintext). */
  readonly ssl?: boolean | ConnectionOptions;
  /**
   * SASL authentication, passed to kafkajs as is: `{ mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512', username, password }`,
   * or `aws` / `oauthbearer` with their fields. Never logged or quoted in an error. Default: none.
   */
  readonly sasl?: SASLOptions;
  /**
   * An existing kafkajs `Kafka` instance to make the producers and the admin client from, instead of
   * `brokers`, `clientId`, `ssl`, `sasl`, `requestTimeoutMs` and `connectionTimeoutMs` (configure those on the
   * instance; they cannot be combined; the produce timeout is then 10000 ms). Its own logger is used. The
   * transport never changes it. Default: none.
   */
  readonly kafka?: Kafka;
  /** Topics for some destinations, e.g. `{ orders: 'shop.orders.v1' }`. Default: none (see topicPrefix). */
  readonly topics?: Readonly<Record<string, string>>;
  /** The topic of a destination not listed in `topics` is `topicPrefix + destination`. Default: `''` (the destination's name). */
  readonly topicPrefix?: string;
  /**
   * Largest message accepted, in bytes (key, value, headers and Kafka's record and batch framing), checked
   * before sending: larger events fail permanently. Also the most bytes put into one produce request, so that
   * a batch of small events never exceeds the broker's limit. Keep it at or below the topic's
   * `max.message.bytes` (the broker's `message.max.bytes`). Default: 1048576 (1 MiB, Kafka's default).
   */
  readonly maxMessageBytes?: number;
  /**
   * Let the broker create a missing topic on first publish (if the broker's `auto.create.topics.enable` allows,
   * with its default partitions). When false, a missing topic is checked with the admin client and the event
   * fails permanently as unroutable. Default: false.
   */
  readonly allowAutoTopicCreation?: boolean;
  /** Record batch compression. `gzip` is built in; `snappy`, `lz4` and `zstd` need a codec registered in kafkajs's `CompressionCodecs` first. Default: `'none'`. */
  readonly compression?: KafkaCompression;
  /**
   * Longest wait for a broker's answer to one request, in ms; also how long the broker may wait for its
   * replicas' acks (the produce timeout). The client then retries (`clientRetries`) before the events count
   * as retriable. Default: 10000.
   */
  readonly requestTimeoutMs?: number;
  /** Longest wait for a TCP (and TLS) connection to a broker, in ms. Default: 3000. */
  readonly connectionTimeoutMs?: number;
  /**
   * How often kafkajs itself retries a failed request (100 ms growing to 1 s between tries) before the
   * transport reports the events as retriable and the relay's own backoff takes over. Default: 2.
   */
  readonly clientRetries?: number;
  /**
   * Idempotent producers kept open. Each carries one publish call at a time, so that concurrent calls (the
   * relay's lanes) go out in parallel without sharing sequence numbers; a call waits while all are busy.
   * Default: 2 (the relay's default number of lanes).
   */
  readonly producers?: number;
  /** Receives kafkajs's log lines (info and above; addresses and error texts, never credentials or payloads) and the transport's own. Default: silent. */
  readonly logger?: Logger;
}

export type ResolvedKafkaConnection =
  | {
      readonly kind: 'config';
      readonly brokers: readonly string[];
      readonly clientId: string;
      readonly ssl: boolean | Readonly<ConnectionOptions> | undefined;
      readonly sasl: SASLOptions | undefined;
      readonly requestTimeoutMs: number;
      readonly connectionTimeoutMs: number;
    }
  | { readonly kind: 'instance'; readonly kafka: Kafka };

/** KafkaTransportOptions after `resolveKafkaTransportOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedKafkaTransportOptions {
  readonly connection: ResolvedKafkaConnection;
  /** The brokers for messages (`127.0.0.1:9092,...`), or a note that an instance was given. Never credentials. */
  readonly display: string;
  /** The SASL mechanism for messages, e.g. `PLAIN`; null without SASL. */
  readonly saslMechanism: string | null;
  readonly topics: ReadonlyMap<string, string>;
  readonly topicPrefix: string;
  readonly maxMessageBytes: number;
  readonly allowAutoTopicCreation: boolean;
  readonly compression: KafkaCompression;
  readonly requestTimeoutMs: number;
  readonly clientRetries: number;
  readonly producers: number;
  readonly logger: Logger;
}

/** Kafka's own rule for topic names. */
const TOPIC = /^[A-Za-z0-9._-]{1,249}$/;
const BROKER = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):\d{1,5}$/;
const MECHANISMS = ['plain', 'scram-sha-256', 'scram-sha-512', 'aws', 'oauthbearer'];
const COMPRESSIONS: readonly KafkaCompression[] = ['none', 'gzip', 'snappy', 'lz4', 'zstd'];
const INSTANCE_EXCLUSIVE = ['brokers', 'clientId', 'ssl', 'sasl', 'requestTimeoutMs', 'connectionTimeoutMs'] as const;

/**
 * Validates KafkaTransport options, fills defaults and freezes them. Throws ConfigError naming the field
 * (`brokers[0]`, `topics.orders`, `maxMessageBytes`, ...) and the fix; messages never quote `sasl`.
 *
 * @example
 * const resolved = resolveKafkaTransportOptions({ topicPrefix: 'shop.' });
 * topicOf(resolved, 'orders'); // 'shop.orders'
 */
export function resolveKafkaTransportOptions(options: KafkaTransportOptions = {}): ResolvedKafkaTransportOptions {
  if (options === null || typeof options !== 'object') {
    throw new ConfigError('options', 'must be an object such as { brokers: ["127.0.0.1:9092"] }');
  }
  const topicPrefix = options.topicPrefix ?? '';
  if (typeof topicPrefix !== 'string' || (topicPrefix !== '' && !/^[A-Za-z0-9._-]+$/.test(topicPrefix))) {
    throw new ConfigError('topicPrefix', 'may only contain letters, digits, ".", "_" and "-" (Kafka topic characters), e.g. "shop."');
  }
  const logger = options.logger ?? silentLogger;
  if (typeof logger !== 'object' || logger === null || typeof logger.warn !== 'function' || typeof logger.debug !== 'function') {
    throw new ConfigError('logger', 'must have debug, info, warn and error methods (a pino logger fits)');
  }
  const compression = options.compression ?? 'none';
  if (!COMPRESSIONS.includes(compression)) throw new ConfigError('compression', `must be one of ${COMPRESSIONS.join(', ')}`);
  if (!codecRegistered(compression)) {
    throw new ConfigError('compression', `${compression} needs a codec: register one in kafkajs's CompressionCodecs (e.g. kafkajs-${compression}) before creating the transport, or use gzip`);
  }
  const allowAutoTopicCreation = options.allowAutoTopicCreation ?? false;
  if (typeof allowAutoTopicCreation !== 'boolean') throw new ConfigError('allowAutoTopicCreation', 'must be true or false');
  const connection = resolveConnection(options);
  return Object.freeze({
    connection,
    display: connection.kind === 'config' ? connection.brokers.join(',') : 'the brokers of the given kafka instance',
    saslMechanism: connection.kind === 'config' && connection.sasl ? connection.sasl.mechanism.toUpperCase() : null,
    topics: resolveTopics(options.topics),
    topicPrefix,
    maxMessageBytes: int('maxMessageBytes', options.maxMessageBytes, 1_048_576, 1024, 100 * 1024 * 1024),
    allowAutoTopicCreation,
    compression,
    requestTimeoutMs: connection.kind === 'config' ? connection.requestTimeoutMs : 10_000,
    clientRetries: int('clientRetries', options.clientRetries, 2, 0, 20),
    producers: int('producers', options.producers, 2, 1, 16),
    logger,
  });
}

/** The topic a destination's events go to, or null when it is not a legal Kafka topic name. */
export function topicOf(options: ResolvedKafkaTransportOptions, destination: string): string | null {
  const topic = options.topics.get(destination) ?? options.topicPrefix + destination;
  return TOPIC.test(topic) && topic !== '.' && topic !== '..' ? topic : null;
}

function resolveConnection(options: KafkaTransportOptions): ResolvedKafkaConnection {
  if (options.kafka !== undefined) {
    for (const field of INSTANCE_EXCLUSIVE) {
      if (options[field] !== undefined) throw new ConfigError(field, 'cannot be combined with kafka: configure the Kafka instance itself');
    }
    const k = options.kafka as Partial<Kafka> | null;
    if (k === null || typeof k !== 'object' || typeof k.producer !== 'function' || typeof k.admin !== 'function') {
      throw new ConfigError('kafka', 'must be a kafkajs Kafka instance (new Kafka({ brokers: [...] }))');
    }
    return Object.freeze({ kind: 'instance', kafka: options.kafka });
  }
  const brokers = options.brokers ?? ['127.0.0.1:9092'];
  if (!Array.isArray(brokers) || brokers.length === 0) throw new ConfigError('brokers', 'must be a non-empty array of "host:port" strings, e.g. ["127.0.0.1:9092"]');
  brokers.forEach((b: unknown, i) => {
    // The value is not quoted: a mistaken "user:pass@host" must not end up in a log.
    if (typeof b !== 'string' || !BROKER.test(b) || Number(b.slice(b.lastIndexOf(':') + 1)) > 65_535) {
      throw new ConfigError(`brokers[${i}]`, 'must be "host:port" (IPv6 as "[::1]:9092"), without scheme or credentials; put credentials in sasl');
    }
  });
  const clientId = options.clientId ?? 'txbox';
  if (typeof clientId !== 'string' || clientId.length === 0 || clientId.length > 255) throw new ConfigError('clientId', 'must be a non-empty string of at most 255 characters');
  const ssl = options.ssl;
  if (ssl !== undefined && typeof ssl !== 'boolean' && (typeof ssl !== 'object' || ssl === null)) {
    throw new ConfigError('ssl', 'must be true or an object of TLS options (ca, cert, key, servername, ...)');
  }
  return Object.freeze({
    kind: 'config',
    brokers: Object.freeze([...brokers]),
    clientId,
    ssl: typeof ssl === 'object' ? Object.freeze({ ...ssl }) : ssl,
    sasl: resolveSasl(options.sasl),
    requestTimeoutMs: int('requestTimeoutMs', options.requestTimeoutMs, 10_000, 100, 3_600_000),
    connectionTimeoutMs: int('connectionTimeoutMs', options.connectionTimeoutMs, 3000, 100, 600_000),
  });
}

function resolveSasl(sasl: SASLOptions | undefined): SASLOptions | undefined {
  if (sasl === undefined) return undefined;
  if (sasl === null || typeof sasl !== 'object') throw new ConfigError('sasl', 'must be an object such as { mechanism: "scram-sha-512", username, password }');
  const mechanism = (sasl as { mechanism?: unknown }).mechanism;
  if (typeof mechanism !== 'string' || !MECHANISMS.includes(mechanism.toLowerCase())) {
    throw new ConfigError('sasl.mechanism', `must be one of ${MECHANISMS.join(', ')}`);
  }
  const m = mechanism.toLowerCase();
  if (m === 'plain' || m.startsWith('scram-')) {
    const { username, password } = sasl as { username?: unknown; password?: unknown };
    if (typeof username !== 'string' || username === '') throw new ConfigError('sasl.username', `is required for ${mechanism}`);
    if (typeof password !== 'string') throw new ConfigError('sasl.password', `is required for ${mechanism}`);
  }
  return sasl;
}

function resolveTopics(topics: KafkaTransportOptions['topics']): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (topics === undefined) return map;
  if (topics === null || typeof topics !== 'object' || Array.isArray(topics)) {
    throw new ConfigError('topics', 'must be an object of destination names to topics, e.g. { orders: "shop.orders.v1" }');
  }
  for (const [destination, topic] of Object.entries(topics)) {
    if (typeof topic !== 'string' || !TOPIC.test(topic) || topic === '.' || topic === '..') {
      throw new ConfigError(`topics.${destination}`, 'must be a Kafka topic name: 1 to 249 letters, digits, ".", "_" or "-"');
    }
    map.set(destination, topic);
  }
  return map;
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
