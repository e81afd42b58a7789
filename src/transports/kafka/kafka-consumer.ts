/**
 * The Kafka consumer of the inbox: a kafkajs consumer group whose partitions
 * are handled in offset order, with offsets committed only after the inbox
 * committed. The kafkajs consumer API is used here (the transport's seam,
 * kafka-client.ts, covers producing).
 */
import type { Consumer as KafkaJsConsumer, EachBatchPayload, IHeaders, Kafka, KafkaMessage, Producer } from 'kafkajs';
import { FiringEmitter, keyHash } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import type { HealthReport } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { ConsumerCore, within, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore, keptNowhere } from '../../inbox/consumer/delivery-core.ts';
import { CLIENT_RETRY, consumerConfigOf, kafkaOf, resolveKafkaConsumerOptions, type KafkaConsumerOptions, type ResolvedKafkaConsumerOptions } from './kafka-consumer-options.ts';
import { BatchRun, Generation, type BatchHost } from './kafka-batch-run.ts';
import { trackSockets, type SocketTracker } from './kafka-client.ts';
import { kafkaOutage, startError } from './kafka-outcomes.ts';

export { resolveKafkaConsumerOptions, type KafkaConsumerOptions, type ResolvedKafkaConsumerOptions } from './kafka-consumer-options.ts';

/** A handler retry due within this many ms waits in place; a later one pauses the partition instead (see #retryLater). */
const RETRY_IN_PLACE_MS = 1000;
/** Records stored per inbox-queue transaction in worker mode. */
const QUEUE_CHUNK = 500;
const START_RETRY = { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 } as const;
/** Protocol errors that mean "this member's generation is over": stop taking records, commit, rejoin. */
const REBALANCE = new Set(['REBALANCE_IN_PROGRESS', 'ILLEGAL_GENERATION', 'NOT_COORDINATOR_FOR_GROUP', 'NOT_COORDINATOR', 'UNKNOWN_MEMBER_ID', 'FENCED_INSTANCE_ID']);

export type KafkaSettledStatus = 'processed' | 'duplicate' | 'ignored' | 'held' | 'queued';

/** Events of a KafkaConsumer, for metrics and logs. Never carry payloads. */
export interface KafkaConsumerEvents {
  /** A record's event committed (inbox or queue); its offset is committed with the next commit. `durationMs`: from handing it to the inbox or queue until that committed. */
  settled: { readonly topic: string; readonly partition: number; readonly offset: string; readonly id: string; readonly type: string; readonly status: KafkaSettledStatus; readonly durationMs: number };
  /** A dead event was copied to `deadLetterTopic` (null: not copied); the consumer commits past it. */
  deadLettered: { readonly topic: string; readonly partition: number; readonly offset: string; readonly id: string; readonly type: string; readonly deadLetterTopic: string | null; readonly attempts: number; readonly reason: string };
  /** A record that is not a readable txbox event was copied to `deadLetterTopic` (null: only logged); the consumer commits past it. */
  rejected: { readonly topic: string; readonly partition: number; readonly offset: string; readonly deadLetterTopic: string | null; readonly reason: string };
  /** A handler retry is due in more than a second: the partition is paused for `delayMs`, then the record is fetched again. */
  paused: { readonly topic: string; readonly partition: number; readonly offset: string; readonly id: string; readonly attempts: number; readonly delayMs: number };
  /** Offset `offset` (the next record to read) was committed for the group. */
  committed: { readonly topic: string; readonly partition: number; readonly offset: string };
  /** The group (re)assigned partitions to this process. */
  assigned: { readonly partitions: Readonly<Record<string, readonly number[]>> };
  /** The group is rebalancing: in-flight records finished and were committed; this process rejoins. */
  rebalancing: { readonly groupId: string };
  /** A Kafka, inbox or queue operation failed; it is retried (the record stays uncommitted meanwhile). */
  error: ConsumerErrorEvent;
}

/** The typed emitter of `KafkaConsumer.events`. */
export class KafkaConsumerEmitter extends FiringEmitter<KafkaConsumerEvents> {}

/** Counters since construction. */
export interface KafkaConsumerStats extends ConsumerCounts {
  /** Handler failures retried (in place or after a pause). */
  retried: number;
  paused: number;
  commits: number;
  /** Times the group assigned partitions to this process. */
  assignments: number;
}

interface Session {
  readonly consumer: KafkaJsConsumer;
  readonly producer: Producer | null;
  readonly off: (() => void)[];
  /** Every socket of this session's client: stop() destroys those kafkajs leaves open. */
  readonly sockets: SocketTracker;
}

/**
 * Consumes Kafka topics in a consumer group and hands each record's event to
 * an inbox, committing a partition's offset (offset + 1) only after the inbox
 * committed the records before it. Each partition is handled in offset order
 * (optionally several keys at once: `keyConcurrency`), up to
 * `partitionConcurrency` partitions in parallel. On a rebalance, in-flight
 * records finish and are committed before this process rejoins; anything
 * uncommitted is read again by the new owner and skipped by the inbox. Dead
 * events and unreadable records are copied to the dead-letter topic, then
 * committed past. See docs/transports/kafka.md#consuming.
 *
 * @example
 * const consumer = new KafkaConsumer({ brokers: ['kafka-1:9092'], groupId: 'billing', topics: ['shop.orders'], inbox });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class KafkaConsumer implements Consumer {
  readonly name = 'kafka';
  /** Lifecycle events: `consumer.events.on('deadLettered', ...)`. */
  readonly events = new KafkaConsumerEmitter();
  readonly stats: KafkaConsumerStats = { received: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, queued: 0, dead: 0, rejected: 0, retried: 0, paused: 0, commits: 0, assignments: 0 };
  readonly #o: ResolvedKafkaConsumerOptions;
  readonly #host: BatchHost;
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #core: ConsumerCore;
  #session: Session | null = null;
  #generation = new Generation();
  #assignment: Readonly<Record<string, readonly number[]>> = {};
  #restarts = 0;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: KafkaConsumerOptions) {
    this.#o = resolveKafkaConsumerOptions(options);
    this.#host = {
      heartbeatIntervalMs: this.#o.heartbeatIntervalMs,
      failed: (operation, err, generation) => {
        if (isRebalance(err)) {
          if (!generation.revoked) this.#o.logger.info({ groupId: this.#o.groupId, operation, err: messageOf(err) }, 'txbox kafka consumer: the group is rebalancing; finishing in-flight records');
          generation.revoke();
        } else this.#error(operation, err);
      },
      committed: (topic, partition, offset) => {
        this.stats.commits++;
        this.events.fire('committed', { topic, partition, offset });
      },
    };
    const o = this.#o;
    this.#core = new ConsumerCore({
      name: 'kafka',
      logger: o.logger,
      context: () => ({ groupId: o.groupId }),
      onError: (operation, message) => this.events.fire('error', { operation, message }),
      connected: () => this.#session !== null && Object.keys(this.#assignment).length > 0,
      describe: messageOf,
      outage: kafkaOutage,
    });
  }

  get #state(): ConsumerCore['state'] {
    return this.#core.state;
  }

  /** Running with partitions assigned, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
  }

  /** The partitions the group gave this process at its last (re)join. */
  get assignment(): Readonly<Record<string, readonly number[]>> {
    return this.#assignment;
  }

  /**
   * Connects, checks that the topics and dead-letter topics exist, joins the
   * group and starts fetching; resolves once the group assigned partitions.
   * Throws ConfigError naming `brokers`, `sasl`, `topics`, `deadLetterTopic`,
   * `groupId` or `sessionTimeoutMs`.
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(): Promise<void> {
    return this.#core.start((cancel) => this.#start(cancel));
  }

  /**
   * Stops fetching, lets in-flight records finish and commits their offsets
   * (a record waiting to retry is left at once), within `stopTimeoutMs`, then
   * leaves the group and disconnects. Records not committed go to the group's
   * other processes (or the next start) and are skipped by the inbox if done.
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#stopNow());
  }

  async #start(cancel: AbortSignal): Promise<void> {
    const o = this.#o;
    this.#generation = new Generation();
    this.#restarts = 0;
    let producer: Producer | null = null;
    let consumer: KafkaJsConsumer | null = null;
    const off: (() => void)[] = [];
    const sockets = trackSockets();
    // stop() during the start: the attempt in flight (a broker that accepts and never answers) fails at once.
    const onCancel = (): void => void sockets.destroyAll();
    cancel.addEventListener('abort', onCancel, { once: true });
    try {
      const kafka = kafkaOf(o, sockets.socketFactory);
      await this.#checkCluster(kafka);
      if (o.deadLetterTopics.size > 0) {
        producer = kafka.producer({ allowAutoTopicCreation: false, retry: CLIENT_RETRY });
        await producer.connect().catch((err: unknown) => {
          throw startError(err, o.connection);
        });
      }
      const c = kafka.consumer(consumerConfigOf(o, async () => this.#state === 'running' || this.#state === 'starting'));
      consumer = c;
      const joined = this.#watch(c, off);
      await c.connect().catch((err: unknown) => {
        throw startError(err, o.connection);
      });
      await c.subscribe({ topics: [...o.topics], fromBeginning: o.fromBeginning });
      this.#session = { consumer: c, producer, off, sockets };
      await this.#run(c);
      await joined;
    } catch (err) {
      for (const f of off) f();
      this.#session = null;
      await consumer?.disconnect().catch(() => {});
      await producer?.disconnect().catch(() => {});
      sockets.destroyAll();
      throw err;
    } finally {
      cancel.removeEventListener('abort', onCancel);
    }
    o.logger.info({ groupId: o.groupId, topics: o.topics, brokers: o.connection.display }, 'txbox kafka consumer: started');
  }

  #run(c: KafkaJsConsumer): Promise<void> {
    return c.run({
      autoCommit: false,
      // Offsets are resolved record by record (BatchRun.finish): an unfinished record is fetched again.
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.#o.partitionConcurrency,
      eachBatch: (p) => this.#eachBatch(p),
    });
  }

  /** Subscribes to the group's events; resolves at the first assignment, rejects when the consumer crashes for good before it. */
  #watch(c: KafkaJsConsumer, off: (() => void)[]): Promise<void> {
    const o = this.#o;
    let settle: { resolve: () => void; reject: (e: Error) => void } | null = null;
    const joined = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
    const limit = o.rebalanceTimeoutMs + 30_000;
    const timer = setTimeout(() => settle?.reject(new TransportError('retriable', `the consumer did not join group ${JSON.stringify(o.groupId)} at ${o.connection.display} within ${limit} ms`)), limit);
    void joined.catch(() => {}).finally(() => clearTimeout(timer));
    off.push(() => clearTimeout(timer));
    off.push(
      c.on(c.events.GROUP_JOIN, ({ payload }) => {
        this.#generation = new Generation();
        this.#restarts = 0;
        this.#assignment = Object.freeze({ ...payload.memberAssignment });
        this.stats.assignments++;
        o.logger.info({ groupId: o.groupId, generationLeader: payload.isLeader, partitions: payload.memberAssignment }, 'txbox kafka consumer: partitions assigned');
        this.events.fire('assigned', { partitions: this.#assignment });
        settle?.resolve();
      }),
      c.on(c.events.REBALANCING, () => {
        this.#generation.revoke();
        this.events.fire('rebalancing', { groupId: o.groupId });
      }),
      // A revoked generation that kafkajs did not rejoin (it found nothing to do): new batches go on.
      c.on(c.events.FETCH_START, () => {
        if (this.#generation.revoked) this.#generation = new Generation();
      }),
      c.on(c.events.CRASH, ({ payload }) => {
        this.#error('consume', payload.error);
        if (this.#state === 'starting' && !payload.restart) settle?.reject(this.#crashError(payload.error));
        else if (this.#state === 'running' && !payload.restart) this.#restartLater(c);
      }),
    );
    return joined;
  }

  /** kafkajs restarts after errors it flags retriable; after others it stays down. Run it again with backoff. */
  #restartLater(c: KafkaJsConsumer): void {
    const delay = Math.min(30_000, 1000 * 2 ** Math.min(this.#restarts++, 5));
    this.#o.logger.warn({ groupId: this.#o.groupId, delayMs: delay }, 'txbox kafka consumer: kafkajs stopped the consumer; running it again');
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      if (this.#state === 'running') this.#run(c).catch((err: unknown) => this.#error('restart', err));
    }, delay);
    this.#timers.add(timer);
  }

  async #stopNow(): Promise<void> {
    const session = this.#session;
    if (!session) return;
    const o = this.#o;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    // kafkajs stops fetching, waits for the running batches (which finish their record and commit), leaves the group.
    if (!(await within(session.consumer.disconnect(), o.stopTimeoutMs))) {
      o.logger.warn({ groupId: o.groupId }, `txbox kafka consumer: stop timed out after ${o.stopTimeoutMs} ms (stopTimeoutMs); uncommitted records are redelivered to the group`);
    }
    await session.producer?.disconnect().catch(() => {});
    const left = session.sockets.destroyAll();
    if (left > 0) o.logger.debug({ groupId: o.groupId, sockets: left }, 'txbox kafka consumer: closed sockets kafkajs left open');
    for (const f of session.off) f();
    this.#session = null;
    this.#assignment = {};
    o.logger.info({ groupId: o.groupId }, 'txbox kafka consumer: stopped');
  }

  /** Connects an admin client (address, TLS, SASL) and checks that every topic and dead-letter topic exists. */
  async #checkCluster(kafka: Kafka): Promise<void> {
    const o = this.#o;
    const admin = kafka.admin({ retry: START_RETRY });
    let existing: Set<string>;
    try {
      await admin.connect();
      existing = new Set(await admin.listTopics());
    } catch (err) {
      throw startError(err, o.connection);
    } finally {
      await admin.disconnect().catch(() => {});
    }
    const where = `at ${o.connection.display}`;
    const missing = o.topics.filter((t) => !existing.has(t));
    if (missing.length > 0) throw new ConfigError('topics', `${list(missing)} ${missing.length === 1 ? 'does' : 'do'} not exist ${where}; create ${missing.length === 1 ? 'it' : 'them'} (with the partitions you need), or fix topics`);
    const dead = [...new Set(o.deadLetterTopics.values())].filter((t) => !existing.has(t));
    if (dead.length > 0) {
      throw new ConfigError('deadLetterTopic', `${list(dead)} ${dead.length === 1 ? 'does' : 'do'} not exist ${where}; create ${dead.length === 1 ? 'it' : 'them'} (one partition is enough), choose another deadLetterTopic, or set it to null to keep dead events only in the inbox`);
    }
  }

  #crashError(err: Error): Error {
    const o = this.#o;
    const type = protocolType(err);
    if (type === 'INVALID_SESSION_TIMEOUT') {
      return new ConfigError('sessionTimeoutMs', `${o.sessionTimeoutMs} is outside what the brokers allow (group.min.session.timeout.ms, default 6000, to group.max.session.timeout.ms, default 1800000)`, { cause: err });
    }
    if (type === 'GROUP_AUTHORIZATION_FAILED' || type === 'INVALID_GROUP_ID') {
      return new ConfigError('groupId', `the brokers refused group ${JSON.stringify(o.groupId)} (${type}); check the group name and that the principal may Read it (sasl)`, { cause: err });
    }
    if (type === 'TOPIC_AUTHORIZATION_FAILED') return new ConfigError('sasl', `the principal may not read the topics (${type}); grant Read and Describe on them`, { cause: err });
    return startError(err, o.connection);
  }

  /**
   * One partition's fetched batch runs on the shared DeliveryCore (a record is
   * its index in the batch): each key's records in offset order, several keys
   * at once (`keyConcurrency`), worker mode's chunks per transaction. An ack
   * finishes the record; only the finished prefix is committed.
   */
  async #eachBatch(p: EachBatchPayload): Promise<void> {
    const o = this.#o;
    const run = new BatchRun(p, this.#generation, this.#core.signal, this.#host, o.destinations.get(p.batch.topic) ?? '');
    const deliveries = new DeliveryCore<number>({
      core: this.#core,
      handler: o.handler,
      concurrency: o.keyConcurrency,
      batch: QUEUE_CHUNK,
      noun: 'record',
      port: {
        ack: (i) => this.#finish(run, i),
        deadLetter: (i, reason, event, attempts, kept) => this.#deadLetter(run, i, reason, event, attempts, keptNowhere(o.handler, event, attempts, kept)),
        // Not finished: stays uncommitted, and is fetched again (by this process or the partition's next owner).
        release: () => {},
        signal: () => run.signal,
        // Not while stopping, after a rebalance, after a seek, or after a backoff.
        admit: () => (run.take() ? (this.stats.received++, 'handle') : 'release'),
        retryLater: (i, event, attempts, delayMs) => this.#retryLater(run, i, event, attempts, delayMs),
      },
      hooks: {
        settled: (i, event, status, durationMs) => {
          if (status === 'dead') return;
          this.stats[status]++;
          this.events.fire('settled', { topic: run.topic, partition: run.partition, offset: run.messages[i]!.offset, id: event.id, type: event.type, status, durationMs });
        },
      },
    });
    try {
      run.messages.forEach((_, i) => deliveries.accept(i, run.parsed(i)));
      await deliveries.onIdle();
    } finally {
      await run.commit();
      run.end();
    }
    if (run.halt === 'backoff' && this.#state !== 'stopping') {
      // Paused, not slept in: kafkajs fetches again only after every batch of a fetch finished, so a wait here would hold all partitions.
      const resume = p.pause();
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        resume();
      }, run.backoffMs);
      this.#timers.add(timer);
    }
  }

  async #finish(run: BatchRun, i: number): Promise<void> {
    run.finish(i);
    await run.beat();
    if (run.commitDue()) await run.commit();
  }

  /**
   * A retry due later than RETRY_IN_PLACE_MS ends the batch and pauses the
   * partition until then (the record is fetched again), instead of holding
   * every partition of the fetch; a sooner one waits in place.
   */
  #retryLater(run: BatchRun, i: number, event: OutboxEvent, attempts: number, delayMs: number): boolean {
    this.stats.retried++;
    if (delayMs <= RETRY_IN_PLACE_MS) return false;
    run.backoff(delayMs);
    this.stats.paused++;
    this.events.fire('paused', { topic: run.topic, partition: run.partition, offset: run.messages[i]!.offset, id: event.id, attempts, delayMs });
    return true;
  }

  /**
   * A dead event, or a record that is not a txbox event (logged by offset,
   * never its content) or that the inbox queue refused: copied to the
   * dead-letter topic, then committed past. False: the copy did not succeed
   * before stop or revoke; the record stays uncommitted.
   */
  async #deadLetter(run: BatchRun, i: number, reason: string, event: OutboxEvent | null, attempts: number | null, only: boolean): Promise<boolean> {
    const o = this.#o;
    const m = run.messages[i]!;
    const target = o.deadLetterTopics.get(run.topic) ?? null;
    const at = { topic: run.topic, partition: run.partition, offset: m.offset };
    const rejected = event === null || attempts === null;
    if (rejected) o.logger.warn({ groupId: o.groupId, ...at, reason, deadLetterTopic: target }, 'txbox kafka consumer: unreadable or refused record; dead-lettering it and committing past it');
    if (target !== null && !(await this.#produceDead(run, m, target, reason, attempts))) return false;
    if (rejected) {
      this.stats.rejected++;
      this.events.fire('rejected', { ...at, deadLetterTopic: target, reason: reason.replace(/^unreadable record: /, '') });
    } else {
      this.stats.dead++;
      if (target === null && only) {
        // Not held on to: the partition's commit would stop here for as long as the store refuses it.
        o.logger.error(
          { groupId: o.groupId, ...at, id: event.id, type: event.type, keyHash: keyHash(event.key), attempts, reason },
          'txbox kafka consumer: dead event the inbox could not record and deadLetterTopic is null: committing past it; only the topic keeps it, at this offset, until its retention (set deadLetterTopic, or fix what the inbox store refuses)',
        );
      } else o.logger.warn({ groupId: o.groupId, ...at, id: event.id, type: event.type, keyHash: keyHash(event.key), attempts, deadLetterTopic: target }, 'txbox kafka consumer: dead event dead-lettered; committing past it');
      this.events.fire('deadLettered', { ...at, id: event.id, type: event.type, deadLetterTopic: target, attempts, reason });
    }
    await this.#finish(run, i);
    return true;
  }

  /** The original key, value and headers plus `txbox-dead-*` headers, acked by all in-sync replicas; retried until stop or revoke. */
  async #produceDead(run: BatchRun, m: KafkaMessage, topic: string, reason: string, attempts: number | null): Promise<boolean> {
    const producer = this.#session?.producer;
    if (!producer) return false;
    const headers: IHeaders = {};
    for (const [name, value] of Object.entries(m.headers ?? {})) {
      if (value !== undefined && !name.toLowerCase().startsWith('txbox-dead-')) headers[name] = value;
    }
    headers['txbox-dead-reason'] = reason.replace(/[\r\n]+/g, ' ').trim().slice(0, 1000) || 'unknown';
    headers['txbox-dead-topic'] = run.topic;
    headers['txbox-dead-partition'] = String(run.partition);
    headers['txbox-dead-offset'] = m.offset;
    headers['txbox-dead-group'] = this.#o.groupId;
    if (attempts !== null) headers['txbox-dead-attempts'] = String(attempts);
    const send = (): Promise<true> =>
      producer.send({ topic, acks: -1, timeout: this.#o.connection.requestTimeoutMs, messages: [{ key: m.key, value: m.value, headers }] }).then(() => true);
    // Retried until stop or revoke.
    return (await this.#core.retrying('dead-letter', send, run.signal)) !== null;
  }

  #error(operation: string, err: unknown): void {
    this.#core.failed(operation, err);
  }
}

function isRebalance(err: unknown): boolean {
  return REBALANCE.has(protocolType(err));
}

/** The Kafka protocol error type in an error's cause chain, or ''. */
function protocolType(err: unknown): string {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const type = (e as { type?: unknown }).type;
    if (typeof type === 'string' && type !== '') return type;
  }
  return '';
}

function messageOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const type = protocolType(err);
  return `${err.name}${type ? ` ${type}` : ''}: ${err.message}`;
}

function list(topics: readonly string[]): string {
  return `${topics.length === 1 ? 'topic' : 'topics'} ${topics.map((t) => JSON.stringify(t)).join(', ')}`;
}
