/**
 * The seam between the Kafka transport and its client library (kafkajs 2.2):
 * everything that touches the library's API is here, so that a client swap
 * (see docs/transports/kafka-client-choice.md) stays inside this file and the
 * error classification in kafka-outcomes.ts.
 */
import kafkajs, { type ISocketFactory, type Kafka, type KafkaConfig, type LogEntry, type Message, type Producer } from 'kafkajs';
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import type { Logger } from '../../core/logger.ts';
import type { ResolvedKafkaTransportOptions } from './kafka-transport-options.ts';

const { Kafka: KafkaClass, Partitioners, CompressionTypes, CompressionCodecs, logLevel } = kafkajs;

export type KafkaCompression = 'none' | 'gzip' | 'snappy' | 'lz4' | 'zstd';

/** One message ready to produce. `bytes` is an upper bound of its size in a record batch, framing included. */
export interface KafkaRecord {
  readonly topic: string;
  /** Strings, not Buffers: kafkajs writes strings straight into its request buffer, where a Buffer is one more copy. */
  readonly key: string;
  readonly value: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly bytes: number;
}

/** A connected idempotent producer. Its sequence numbers are only trustworthy until a send fails: then close it and open another. */
export interface ProducerHandle {
  /** Produces every record (one request per broker, acks=all) and resolves once all are acked; rejects with the client's error. */
  send(records: readonly KafkaRecord[]): Promise<void>;
  close(): Promise<void>;
}

export interface AdminHandle {
  /** Names of every topic in the cluster (one Metadata request). */
  listTopics(): Promise<string[]>;
  close(): Promise<void>;
}

export interface KafkaClient {
  /** Connects a new idempotent producer (a fresh producer id); rejects with the client's error. */
  openProducer(): Promise<ProducerHandle>;
  openAdmin(): Promise<AdminHandle>;
  /** Destroys every socket this client still has open (after its producers and admins were closed); returns how many. */
  destroySockets(): number;
}

/**
 * The sockets a kafkajs client opens, so that a consumer's stop() or a
 * transport's close() can destroy those kafkajs leaves behind: a disconnect
 * that races a reconnect (a broker that was killed and restarted) can leave
 * a socket open, which keeps the user's process from exiting (kafkajs issues
 * #1147 and #1639). After `destroyAll()` the factory still answers kafkajs,
 * with sockets destroyed at once, so a late reconnect fails instead of
 * opening a connection nobody closes.
 */
export interface SocketTracker {
  readonly socketFactory: ISocketFactory;
  destroyAll(): number;
  /** Opens sockets normally again (a transport started after close()). */
  reopen(): void;
}

/** kafkajs's own keep-alive delay for its sockets. */
const KEEP_ALIVE_MS = 60_000;

const closedError = (): Error => new Error('the socket was closed by txbox (stop or close)');

export function trackSockets(): SocketTracker {
  const open = new Set<Socket>();
  let closed = false;
  return {
    // The same sockets as kafkajs's default factory (network/socketFactory.js), remembered until they close.
    socketFactory: ({ host, port, ssl, onConnect }) => {
      const socket: Socket = ssl ? tlsConnect({ host, port, ...(isIP(host) ? {} : { servername: host }), ...ssl }, onConnect) : netConnect({ host, port }, onConnect);
      socket.setKeepAlive(true, KEEP_ALIVE_MS);
      if (closed) {
        socket.destroy(closedError());
        return socket;
      }
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      return socket;
    },
    destroyAll: () => {
      closed = true;
      const n = open.size;
      // With an error: kafkajs listens to 'error' (not 'close'), which fails the requests waiting on the socket.
      for (const s of open) s.destroy(closedError());
      open.clear();
      return n;
    },
    reopen: () => {
      closed = false;
    },
  };
}

const CODEC = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
} as const;

/** Whether kafkajs can compress with `compression` (gzip is built in; the others need a registered codec). */
export function codecRegistered(compression: KafkaCompression): boolean {
  if (compression === 'none' || compression === 'gzip') return true;
  const codec = (CompressionCodecs as Partial<Record<number, () => unknown>>)[CODEC[compression]];
  try {
    // kafkajs's own placeholders throw KafkaJSNotImplemented; a registered codec's factory returns the codec.
    return typeof codec === 'function' && codec() !== undefined;
  } catch {
    return false;
  }
}

/** Between kafkajs's own retries: 100 ms, growing to at most 1 s, so that the relay's backoff takes over soon. */
const RETRY = { initialRetryTime: 100, maxRetryTime: 1000 } as const;

export function createKafkaClient(o: ResolvedKafkaTransportOptions): KafkaClient {
  const c = o.connection;
  const retry = { ...RETRY, retries: o.clientRetries };
  const sockets = trackSockets();
  let kafka: Kafka;
  if (c.kind === 'instance') {
    kafka = c.kafka;
  } else {
    const config: KafkaConfig = {
      brokers: [...c.brokers],
      clientId: c.clientId,
      connectionTimeout: c.connectionTimeoutMs,
      authenticationTimeout: c.connectionTimeoutMs,
      requestTimeout: c.requestTimeoutMs,
      retry,
      logLevel: logLevel.INFO,
      logCreator: () => (entry: LogEntry) => forwardLog(o.logger, entry),
      socketFactory: sockets.socketFactory,
    };
    if (c.ssl !== undefined) config.ssl = c.ssl as boolean | ConnectionOptions;
    if (c.sasl !== undefined) config.sasl = c.sasl;
    kafka = new KafkaClass(config);
  }
  return {
    async openProducer() {
      sockets.reopen();
      const producer = kafka.producer({
        idempotent: true,
        // kafkajs serializes an idempotent producer's requests per broker anyway; 1 says so.
        maxInFlightRequests: 1,
        allowAutoTopicCreation: o.allowAutoTopicCreation,
        createPartitioner: Partitioners.DefaultPartitioner, // murmur2, the same partition per key as the Java client
        // kafkajs defaults to unlimited retries for idempotent producers; a failed send replaces the producer instead.
        retry,
      });
      await connectOrClean(producer);
      return {
        send: (records) => send(producer, records, o),
        close: () => producer.disconnect(),
      };
    },
    async openAdmin() {
      sockets.reopen();
      const admin = kafka.admin({ retry });
      await connectOrClean(admin);
      return {
        listTopics: () => admin.listTopics(),
        close: () => admin.disconnect(),
      };
    },
    // A Kafka instance of the user's own opens its sockets with its own factory: those stay the user's to close.
    destroySockets: () => sockets.destroyAll(),
  };
}

async function send(producer: Producer, records: readonly KafkaRecord[], o: ResolvedKafkaTransportOptions): Promise<void> {
  const byTopic = new Map<string, Message[]>();
  for (const r of records) {
    const list = byTopic.get(r.topic);
    const message: Message = { key: r.key, value: r.value, headers: r.headers as Record<string, string> };
    if (list) list.push(message);
    else byTopic.set(r.topic, [message]);
  }
  await producer.sendBatch({
    topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
    acks: -1,
    timeout: o.requestTimeoutMs,
    compression: CODEC[o.compression],
  });
}

async function connectOrClean(client: { connect(): Promise<void>; disconnect(): Promise<void> }): Promise<void> {
  try {
    await client.connect();
  } catch (err) {
    await client.disconnect().catch(() => {});
    throw err;
  }
}

/** Fields of a kafkajs log entry that are passed on: addresses, counters and error texts, never the config. */
const LOG_FIELDS = ['broker', 'clientId', 'topic', 'groupId', 'retryCount', 'retryTime', 'error'] as const;

function forwardLog(logger: Logger, { namespace, level, log }: LogEntry): void {
  const fields: Record<string, unknown> = { component: 'kafkajs', namespace };
  for (const f of LOG_FIELDS) if (log[f] !== undefined) fields[f] = log[f];
  const message = String(log.message);
  // Expected: the transport limits retries on purpose and replaces the producer after a failed send.
  if (message.startsWith('Limiting retries for the idempotent producer')) return logger.debug(fields, message);
  if (level === logLevel.ERROR) logger.error(fields, message);
  else if (level === logLevel.WARN) logger.warn(fields, message);
  else if (level === logLevel.INFO) logger.info(fields, message);
  else logger.debug(fields, message);
}
