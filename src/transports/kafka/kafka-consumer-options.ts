import kafkajs, { type ConsumerConfig, type ISocketFactory, type Kafka, type KafkaConfig, type LogEntry } from 'kafkajs';
import type { ConnectionOptions } from 'node:tls';
import { ConfigError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int, pick } from '../../inbox/consumer/consumer-options.ts';
import { resolveKafkaTransportOptions, topicOf, type KafkaTransportOptions, type ResolvedKafkaTransportOptions } from './kafka-transport-options.ts';

type ConnectionFields = 'brokers' | 'clientId' | 'ssl' | 'sasl' | 'kafka' | 'requestTimeoutMs' | 'connectionTimeoutMs' | 'topicPrefix' | 'logger';

/**
 * Options of `new KafkaConsumer(...)`. Give `groupId`, the topics (`topics`,
 * or `destinations` mapped like the transport's) and exactly one of `inbox` or
 * `queue`; every other field has a default. The connection fields (`brokers`,
 * `clientId`, `ssl`, `sasl`, `kafka`, `requestTimeoutMs`, `connectionTimeoutMs`)
 * mean what they mean for KafkaTransport.
 *
 * @example
 * const options: KafkaConsumerOptions = { brokers: ['kafka-1:9092'], groupId: 'billing', topics: ['shop.orders'], inbox };
 */
export interface KafkaConsumerOptions extends Pick<KafkaTransportOptions, ConnectionFields> {
  /** The consumer group, one per consuming service (e.g. `'billing'`): its processes share the partitions. Required. */
  readonly groupId: string;
  /**
   * The topics to read: a list of topic names (`['shop.orders']`), or the
   * transport's map of destinations to topics (`{ orders: 'shop.orders.v1' }`),
   * whose topics are read and whose destination names are given to events
   * that carry no `txbox-destination` header. They must exist. Give this or
   * `destinations`.
   */
  readonly topics?: readonly string[] | Readonly<Record<string, string>>;
  /**
   * Destinations to read, mapped to topics as the transport maps them: by
   * `topics` (the map form) or else `topicPrefix + destination`. Default: none.
   */
  readonly destinations?: readonly string[];
  /** Where a group without a committed offset starts: the oldest retained record (true) or new records only (false). Default: false. */
  readonly fromBeginning?: boolean;
  /** Partitions handled at once (kafkajs `partitionsConsumedConcurrently`); each partition is handled in offset order. Default: 6. */
  readonly partitionConcurrency?: number;
  /**
   * Records of one partition handled at once, each of a different key (one
   * key's records still run in offset order). The offset committed is the
   * lowest one below which every record finished. 1 handles each partition
   * strictly in sequence. See docs/transports/kafka.md#consuming. Default: 1.
   */
  readonly keyConcurrency?: number;
  /**
   * Where dead events and unreadable records are copied (the original key,
   * value and headers plus `txbox-dead-*` headers) before the consumer commits
   * past them. `{topic}` stands for the record's topic. The topics must exist.
   * `null`: no copy (the inbox keeps dead events; unreadable records are only
   * logged). Default: `'{topic}.dead'`.
   */
  readonly deadLetterTopic?: string | null;
  /**
   * The group session timeout, in ms: a process that sends no heartbeat for
   * this long is removed from the group, and its partitions (with their
   * uncommitted records) go to the others. Must be within the broker's
   * `group.min.session.timeout.ms` (6000) and `group.max.session.timeout.ms`. Default: 30000.
   */
  readonly sessionTimeoutMs?: number;
  /** How often heartbeats are sent, in ms (also while a handler runs); below sessionTimeoutMs, a third of it or less is usual. Default: the smaller of 3000 and sessionTimeoutMs / 3. */
  readonly heartbeatIntervalMs?: number;
  /**
   * The group rebalance timeout, in ms: how long the group waits for its
   * members to finish their in-flight records, commit, and rejoin when
   * partitions move. A handler slower than this may overlap with the new
   * owner's (the inbox still applies the event once). Default: 60000.
   */
  readonly rebalanceTimeoutMs?: number;
  /** How long `stop()` lets in-flight records finish and commit, in ms; the rest is redelivered to the group. Default: 30000. */
  readonly stopTimeoutMs?: number;
  /** Runs handlers at once: offsets are committed after the inbox committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: records are stored in the inbox queue (in offset order, batched) and then committed; inbox workers run the handlers. */
  readonly queue?: InboxQueue;
}

/** KafkaConsumerOptions after `resolveKafkaConsumerOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedKafkaConsumerOptions {
  /** The connection, checked by the transport's resolver (`display` and `saslMechanism` are safe for messages). */
  readonly connection: ResolvedKafkaTransportOptions;
  readonly groupId: string;
  /** The topics to subscribe, each once. */
  readonly topics: readonly string[];
  /** The destination given to events of a topic that carry no `txbox-destination` header. */
  readonly destinations: ReadonlyMap<string, string>;
  readonly fromBeginning: boolean;
  readonly partitionConcurrency: number;
  readonly keyConcurrency: number;
  /** The dead-letter topic of each subscribed topic; empty when `deadLetterTopic` is null. */
  readonly deadLetterTopics: ReadonlyMap<string, string>;
  readonly sessionTimeoutMs: number;
  readonly heartbeatIntervalMs: number;
  readonly rebalanceTimeoutMs: number;
  readonly stopTimeoutMs: number;
  readonly handler: { readonly kind: 'inbox'; readonly inbox: InboxProcessor } | { readonly kind: 'queue'; readonly queue: InboxQueue };
  readonly logger: Logger;
}

const TOPIC = /^[A-Za-z0-9._-]{1,249}$/;
const { Kafka: KafkaClass, logLevel } = kafkajs;

/** kafkajs's own retries for the group, fetches, commits and dead-letter sends; after them it restarts the consumer. */
export const CLIENT_RETRY = { retries: 5, initialRetryTime: 300, maxRetryTime: 10_000 } as const;

/**
 * Validates KafkaConsumer options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix; messages never quote `sasl` or
 * `brokers` entries.
 *
 * @example
 * const resolved = resolveKafkaConsumerOptions({ groupId: 'billing', topics: ['shop.orders'], inbox });
 */
export function resolveKafkaConsumerOptions(options: KafkaConsumerOptions): ResolvedKafkaConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { brokers, groupId, topics, inbox }');
  const { inbox, queue } = options;
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  if (inbox && typeof inbox.process !== 'function') throw new ConfigError('inbox', 'must be an Inbox (createInbox(...))');
  if (queue && typeof queue.receive !== 'function') throw new ConfigError('queue', 'must be an InboxQueue');
  const groupId = options.groupId;
  if (typeof groupId !== 'string' || groupId.length === 0 || groupId.length > 255 || /[\x00-\x1f\x7f]/.test(groupId)) {
    throw new ConfigError('groupId', 'is required: 1 to 255 printable characters, one group per consuming service, e.g. "billing"');
  }
  const mapped = options.topics !== undefined && !Array.isArray(options.topics) ? (options.topics as Readonly<Record<string, string>>) : undefined;
  // The transport's resolver checks the connection fields, the topic map and the prefix, and names them the same way.
  const connection = resolveKafkaTransportOptions({
    ...pick(options, ['brokers', 'clientId', 'ssl', 'sasl', 'kafka', 'requestTimeoutMs', 'connectionTimeoutMs', 'topicPrefix', 'logger']),
    ...(options.kafka === undefined && options.clientId === undefined ? { clientId: 'txbox-consumer' } : {}),
    ...(mapped ? { topics: mapped } : {}),
  });
  const destinations = subscriptions(options, connection);
  const sessionTimeoutMs = int('sessionTimeoutMs', options.sessionTimeoutMs, 30_000, 1000, 3_600_000);
  const heartbeatIntervalMs = int('heartbeatIntervalMs', options.heartbeatIntervalMs, Math.max(100, Math.min(3000, Math.floor(sessionTimeoutMs / 3))), 100, 3_600_000);
  if (heartbeatIntervalMs >= sessionTimeoutMs) throw new ConfigError('heartbeatIntervalMs', `must be below sessionTimeoutMs (${sessionTimeoutMs}); a third of it is usual`);
  const fromBeginning = options.fromBeginning ?? false;
  if (typeof fromBeginning !== 'boolean') throw new ConfigError('fromBeginning', 'must be true or false');
  return Object.freeze({
    connection,
    groupId,
    topics: Object.freeze([...destinations.keys()]),
    destinations,
    fromBeginning,
    partitionConcurrency: int('partitionConcurrency', options.partitionConcurrency, 6, 1, 1000),
    keyConcurrency: int('keyConcurrency', options.keyConcurrency, 1, 1, 10_000),
    deadLetterTopics: deadLetters(options.deadLetterTopic, [...destinations.keys()]),
    sessionTimeoutMs,
    heartbeatIntervalMs,
    rebalanceTimeoutMs: int('rebalanceTimeoutMs', options.rebalanceTimeoutMs, 60_000, 1000, 3_600_000),
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
    handler: inbox ? Object.freeze({ kind: 'inbox' as const, inbox }) : Object.freeze({ kind: 'queue' as const, queue: queue! }),
    logger: connection.logger,
  });
}

/** Each topic to subscribe, with the destination its events get when they carry no `txbox-destination` header. */
function subscriptions(options: KafkaConsumerOptions, connection: ResolvedKafkaTransportOptions): ReadonlyMap<string, string> {
  const out = new Map<string, string>();
  const add = (topic: string, destination: string): void => {
    // Several destinations on one topic: the header tells them apart, so no single name is given.
    out.set(topic, out.has(topic) && out.get(topic) !== destination ? '' : destination);
  };
  if (Array.isArray(options.topics)) {
    if (options.destinations !== undefined) throw new ConfigError('destinations', 'cannot be combined with a list of topics; map destinations with topics: { destination: topic } instead');
    (options.topics as readonly unknown[]).forEach((t, i) => {
      if (typeof t !== 'string' || !TOPIC.test(t) || t === '.' || t === '..') throw new ConfigError(`topics[${i}]`, 'must be a Kafka topic name: 1 to 249 letters, digits, ".", "_" or "-"');
      add(t, t);
    });
  } else if (options.destinations !== undefined) {
    if (!Array.isArray(options.destinations)) throw new ConfigError('destinations', 'must be an array of destination names, e.g. ["orders"]');
    options.destinations.forEach((d: unknown, i) => {
      const topic = typeof d === 'string' && d !== '' ? topicOf(connection, d) : null;
      if (topic === null) throw new ConfigError(`destinations[${i}]`, 'must be a destination whose topic (topics map, or topicPrefix + destination) is a legal Kafka topic name');
      add(topic, d as string);
    });
  } else {
    for (const [destination, topic] of connection.topics) add(topic, destination);
  }
  if (out.size === 0) throw new ConfigError('topics', 'is required: the topics to read, e.g. ["shop.orders"], or destinations: ["orders"]');
  return out;
}

function deadLetters(value: string | null | undefined, topics: readonly string[]): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (value === null) return map;
  const template = value ?? '{topic}.dead';
  if (typeof template !== 'string') throw new ConfigError('deadLetterTopic', 'must be a topic name (may contain {topic}) or null');
  for (const topic of topics) {
    const dead = template.replaceAll('{topic}', topic);
    if (!TOPIC.test(dead) || dead === '.' || dead === '..') {
      throw new ConfigError('deadLetterTopic', `gives ${JSON.stringify(dead)} for topic ${JSON.stringify(topic)}, not a legal Kafka topic name (1 to 249 letters, digits, ".", "_" or "-")`);
    }
    if (topics.includes(dead)) throw new ConfigError('deadLetterTopic', `gives ${JSON.stringify(dead)}, a topic this consumer reads: dead records would come back`);
    map.set(topic, dead);
  }
  return map;
}

/** The kafkajs client these options describe: the given instance, or a new one whose log lines go to the logger. */
/** The kafkajs client these options describe, opening its sockets through `socketFactory` (a user's own Kafka instance keeps its own). */
export function kafkaOf(o: ResolvedKafkaConsumerOptions, socketFactory: ISocketFactory): Kafka {
  const c = o.connection.connection;
  if (c.kind === 'instance') return c.kafka;
  const logger = o.logger;
  const config: KafkaConfig = {
    brokers: [...c.brokers],
    clientId: c.clientId,
    connectionTimeout: c.connectionTimeoutMs,
    authenticationTimeout: c.connectionTimeoutMs,
    requestTimeout: c.requestTimeoutMs,
    logLevel: logLevel.INFO,
    logCreator: () => (entry: LogEntry) => forwardLog(logger, entry),
    socketFactory,
  };
  if (c.ssl !== undefined) config.ssl = c.ssl as boolean | ConnectionOptions;
  if (c.sasl !== undefined) config.sasl = c.sasl;
  return new KafkaClass(config);
}

/** The kafkajs consumer these options describe. `restart` tells kafkajs whether to restart after a retriable crash. */
export function consumerConfigOf(o: ResolvedKafkaConsumerOptions, restart: () => Promise<boolean>): ConsumerConfig {
  return {
    groupId: o.groupId,
    sessionTimeout: o.sessionTimeoutMs,
    rebalanceTimeout: o.rebalanceTimeoutMs,
    heartbeatInterval: o.heartbeatIntervalMs,
    // Bounds how long stop() waits for an idle fetch; a heartbeat goes out after each empty one.
    maxWaitTimeInMs: Math.min(1000, o.heartbeatIntervalMs),
    allowAutoTopicCreation: false,
    retry: { ...CLIENT_RETRY, restartOnFailure: restart },
  };
}

const LOG_FIELDS = ['broker', 'clientId', 'topic', 'groupId', 'memberId', 'retryCount', 'retryTime', 'error'] as const;

/** kafkajs log lines with addresses, counters and error texts only, never the configuration (as kafka-client.ts does for the transport). */
function forwardLog(logger: Logger, { namespace, level, log }: LogEntry): void {
  const fields: Record<string, unknown> = { component: 'kafkajs', namespace };
  for (const f of LOG_FIELDS) if (log[f] !== undefined) fields[f] = log[f];
  const message = String(log.message);
  if (level === logLevel.ERROR) logger.error(fields, message);
  else if (level === logLevel.WARN) logger.warn(fields, message);
  else if (level === logLevel.INFO) logger.info(fields, message);
  else logger.debug(fields, message);
}
