/**
 * The Kafka consumer of the inbox: a kafkajs consumer group whose partitions
 * are handled in offset order, with offsets committed only after the inbox
 * committed. The kafkajs consumer API is used here (the transport's seam,
 * kafka-client.ts, covers producing).
 */
import type { Consumer as KafkaJsConsumer, EachBatchPayload, IHeaders, Kafka, KafkaMessage, Producer } from 'kafkajs';
import { keyHash, TypedEmitter } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import type { Consumer, InboxOutcome } from '../../core/inbox-ports.ts';
import type { Inbox } from '../../inbox/inbox.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { KeyedDispatcher } from '../../inbox/keyed-dispatcher.ts';
import { CLIENT_RETRY, consumerConfigOf, kafkaOf, resolveKafkaConsumerOptions, type KafkaConsumerOptions, type ResolvedKafkaConsumerOptions } from './kafka-consumer-options.ts';
import { parseKafkaMessage, type ParsedKafkaMessage } from './kafka-message.ts';
import { startError } from './kafka-outcomes.ts';

export { resolveKafkaConsumerOptions, type KafkaConsumerOptions, type ResolvedKafkaConsumerOptions } from './kafka-consumer-options.ts';

/** A handler retry due within this many ms waits in place; a later one pauses the partition instead (see #settle). */
const RETRY_IN_PLACE_MS = 1000;
/** During a long batch, progress is committed at least this often. */
const COMMIT_EVERY_MS = 1000;
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
  error: { readonly operation: string; readonly message: string };
}

/** The typed emitter of `KafkaConsumer.events`. */
export class KafkaConsumerEmitter extends TypedEmitter<KafkaConsumerEvents> {
  /** @internal */
  fire<K extends keyof KafkaConsumerEvents>(name: K, payload: KafkaConsumerEvents[K]): void {
    this.emit(name, payload);
  }
}

/** Counters since construction. */
export interface KafkaConsumerStats {
  received: number;
  processed: number;
  duplicate: number;
  ignored: number;
  held: number;
  queued: number;
  dead: number;
  rejected: number;
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
}

/** One group generation as this process sees it: revoked once a heartbeat or commit says the group is rebalancing. */
class Generation {
  revoked = false;
  readonly abort = new AbortController();
  revoke(): void {
    this.revoked = true;
    this.abort.abort();
  }
}

interface BatchHost {
  readonly heartbeatIntervalMs: number;
  /** A heartbeat or commit failed: a rebalance revokes the generation, anything else is logged. */
  failed(operation: string, err: unknown, generation: Generation): void;
  committed(topic: string, partition: number, offset: string): void;
}

/** One fetched batch of one partition: which records finished, what is committed, and whether to go on. */
class BatchRun {
  readonly topic: string;
  readonly partition: number;
  readonly messages: readonly KafkaMessage[];
  readonly signal: AbortSignal;
  /** Why the batch stopped taking records; null while it goes on. */
  halt: 'stopping' | 'revoked' | 'stale' | 'backoff' | null = null;
  backoffMs = 0;
  readonly #p: EachBatchPayload;
  readonly #generation: Generation;
  readonly #host: BatchHost;
  readonly #destination: string;
  readonly #parsed: (ParsedKafkaMessage | undefined)[] = [];
  readonly #done: boolean[] = [];
  /** Index of the first record not finished: everything before it may be committed. */
  #next = 0;
  #committedIndex = -1;
  #lastCommit = performance.now();
  #committing: Promise<void> = Promise.resolve();
  readonly #timer: NodeJS.Timeout;
  readonly #detach: (() => void)[] = [];

  constructor(p: EachBatchPayload, generation: Generation, stop: AbortSignal, host: BatchHost, destination: string) {
    this.#p = p;
    this.topic = p.batch.topic;
    this.partition = p.batch.partition;
    this.messages = p.batch.messages;
    this.#generation = generation;
    this.#host = host;
    this.#destination = destination;
    // Not AbortSignal.any: its dependants stay attached to a long-lived source signal on Node 20.
    const controller = new AbortController();
    const abort = (): void => controller.abort();
    this.signal = controller.signal;
    for (const source of [stop, generation.abort.signal]) {
      if (source.aborted) controller.abort();
      source.addEventListener('abort', abort, { once: true });
      this.#detach.push(() => source.removeEventListener('abort', abort));
    }
    // Heartbeats go on while a handler runs or waits; a rebalance seen by one revokes the generation.
    this.#timer = setInterval(() => void this.beat(), host.heartbeatIntervalMs);
  }

  parsed(i: number): ParsedKafkaMessage {
    return (this.#parsed[i] ??= parseKafkaMessage(this.messages[i]!, this.#destination));
  }

  /** Whether to start another record: not while stopping, after a rebalance, after a seek, or after a backoff. */
  take(): boolean {
    if (this.halt !== null) return false;
    if (this.signal.aborted || !this.#p.isRunning()) this.halt = this.#generation.revoked ? 'revoked' : 'stopping';
    else if (this.#p.isStale()) this.halt = 'stale';
    return this.halt === null;
  }

  /** Stops the batch at a record whose retry is due later: the partition is paused for `ms`. */
  backoff(ms: number): void {
    this.halt ??= 'backoff';
    this.backoffMs = Math.max(this.backoffMs, ms);
  }

  finish(i: number): void {
    this.#done[i] = true;
    const before = this.#next;
    while (this.#done[this.#next]) this.#next++;
    // The fetch position: the next fetch of this partition starts after the last contiguous finished record.
    if (this.#next > before) this.#p.resolveOffset(this.messages[this.#next - 1]!.offset);
  }

  commitDue(): boolean {
    return performance.now() - this.#lastCommit >= COMMIT_EVERY_MS;
  }

  /** Commits offset + 1 of the last record below which all finished (never throws). */
  commit(): Promise<void> {
    this.#committing = this.#committing.then(() => this.#commitNow());
    return this.#committing;
  }

  async #commitNow(): Promise<void> {
    const last = this.#next - 1;
    if (last <= this.#committedIndex) return;
    const offset = (BigInt(this.messages[last]!.offset) + 1n).toString();
    try {
      // The payload's commit has no "is running" check, so progress is committed while stopping too.
      await this.#p.commitOffsetsIfNecessary({ topics: [{ topic: this.topic, partitions: [{ partition: this.partition, offset }] }] });
      this.#committedIndex = last;
      this.#lastCommit = performance.now();
      this.#host.committed(this.topic, this.partition, offset);
    } catch (err) {
      this.#host.failed('commit', err, this.#generation);
    }
  }

  async beat(): Promise<void> {
    try {
      await this.#p.heartbeat();
    } catch (err) {
      this.#host.failed('heartbeat', err, this.#generation);
    }
  }

  /** Waits `ms`; false when stopping or the generation was revoked first. */
  wait(ms: number): Promise<boolean> {
    const signal = this.signal;
    if (signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(ok);
      };
      const onAbort = (): void => done(false);
      const timer = setTimeout(() => done(true), ms);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Runs `fn` until it resolves, with backoff after each error; null once stopping or revoked. */
  async retrying<T>(operation: string, fn: () => Promise<T>, onError: (operation: string, err: unknown) => void): Promise<T | null> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        onError(operation, err);
        if (!(await this.wait(Math.min(30_000, 200 * 2 ** Math.min(attempt, 8))))) return null;
      }
    }
  }

  end(): void {
    clearInterval(this.#timer);
    for (const detach of this.#detach) detach();
  }
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
  #state: 'stopped' | 'starting' | 'running' | 'stopping' = 'stopped';
  #starting: Promise<void> | null = null;
  #stopping: Promise<void> | null = null;
  #stop = new AbortController();
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
   */
  async start(): Promise<void> {
    if (this.#stopping) await this.#stopping;
    if (this.#state === 'running') return;
    this.#starting ??= this.#start().finally(() => (this.#starting = null));
    return this.#starting;
  }

  /**
   * Stops fetching, lets in-flight records finish and commits their offsets
   * (a record waiting to retry is left at once), within `stopTimeoutMs`, then
   * leaves the group and disconnects. Records not committed go to the group's
   * other processes (or the next start) and are skipped by the inbox if done.
   */
  stop(): Promise<void> {
    if (this.#state === 'stopped' && !this.#starting) return Promise.resolve();
    this.#stopping ??= (async () => {
      if (this.#starting) await this.#starting.catch(() => {});
      await this.#stopNow();
    })().finally(() => (this.#stopping = null));
    return this.#stopping;
  }

  async #start(): Promise<void> {
    const o = this.#o;
    this.#state = 'starting';
    this.#stop = new AbortController();
    this.#generation = new Generation();
    this.#restarts = 0;
    let producer: Producer | null = null;
    let consumer: KafkaJsConsumer | null = null;
    const off: (() => void)[] = [];
    try {
      const kafka = kafkaOf(o);
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
      this.#session = { consumer: c, producer, off };
      await this.#run(c);
      await joined;
    } catch (err) {
      for (const f of off) f();
      this.#session = null;
      await consumer?.disconnect().catch(() => {});
      await producer?.disconnect().catch(() => {});
      this.#state = 'stopped';
      throw err;
    }
    this.#state = 'running';
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
    if (this.#state !== 'running' || !session) return;
    const o = this.#o;
    this.#state = 'stopping';
    this.#stop.abort();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    // kafkajs stops fetching, waits for the running batches (which finish their record and commit), leaves the group.
    if (!(await within(session.consumer.disconnect(), o.stopTimeoutMs))) {
      o.logger.warn({ groupId: o.groupId }, `txbox kafka consumer: stop timed out after ${o.stopTimeoutMs} ms (stopTimeoutMs); uncommitted records are redelivered to the group`);
    }
    await session.producer?.disconnect().catch(() => {});
    for (const f of session.off) f();
    this.#session = null;
    this.#assignment = {};
    this.#state = 'stopped';
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

  async #eachBatch(p: EachBatchPayload): Promise<void> {
    const o = this.#o;
    const run = new BatchRun(p, this.#generation, this.#stop.signal, this.#host, o.destinations.get(p.batch.topic) ?? '');
    try {
      const h = o.handler;
      if (h.kind === 'queue') await this.#queueBatch(run, h.queue);
      else if (o.keyConcurrency === 1) await this.#sequentialBatch(run, h.inbox);
      else await this.#keyedBatch(run, h.inbox);
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

  async #sequentialBatch(run: BatchRun, inbox: Inbox): Promise<void> {
    for (let i = 0; i < run.messages.length && run.take(); i++) {
      if (!(await this.#handleRecord(run, i, inbox))) return;
      run.finish(i);
      await run.beat();
      if (run.commitDue()) await run.commit();
    }
  }

  /** Several keys of the partition at once; each key's records in offset order. Only the contiguous finished prefix is committed. */
  async #keyedBatch(run: BatchRun, inbox: Inbox): Promise<void> {
    const dispatcher = new KeyedDispatcher(this.#o.keyConcurrency);
    run.messages.forEach((_, i) => {
      const parsed = run.parsed(i);
      // Unreadable records wait for nothing: a key of their own.
      const key = parsed.ok ? parsed.event.key : `\u0000${i}`;
      dispatcher
        .push(key, async () => {
          if (!run.take() || !(await this.#handleRecord(run, i, inbox))) return;
          run.finish(i);
          await run.beat();
          if (run.commitDue()) await run.commit();
        })
        .catch((err: unknown) => {
          this.#error('handle', err);
          run.backoff(5000);
        });
    });
    await dispatcher.onIdle();
  }

  /** Handles record `i`; true when it is done (committed in the inbox, dead-lettered or rejected) and may be committed past. */
  async #handleRecord(run: BatchRun, i: number, inbox: Inbox): Promise<boolean> {
    const m = run.messages[i]!;
    this.stats.received++;
    const parsed = run.parsed(i);
    if (!parsed.ok) return this.#reject(run, m, parsed.message);
    const event = parsed.event;
    const started = performance.now();
    const outcome = await this.#settle(run, m, event, inbox);
    if (outcome === null) return false;
    if (outcome.status === 'dead') return this.#deadLetter(run, m, event, outcome.error, outcome.attempts);
    this.stats[outcome.status]++;
    this.events.fire('settled', { topic: run.topic, partition: run.partition, offset: m.offset, id: event.id, type: event.type, status: outcome.status, durationMs: performance.now() - started });
    return true;
  }

  /**
   * Like processUntilSettled, with one difference: a retry due later than
   * RETRY_IN_PLACE_MS ends the batch and pauses the partition until then (the
   * record is fetched again), instead of holding every partition of the fetch.
   * Null: not settled (stopping, revoked, or paused); the record stays uncommitted.
   */
  async #settle(run: BatchRun, m: KafkaMessage, event: OutboxEvent, inbox: Inbox): Promise<Exclude<InboxOutcome, { status: 'retry' }> | null> {
    for (let failures = 0; ; ) {
      let outcome: InboxOutcome;
      try {
        outcome = await inbox.process(event);
      } catch (err) {
        // The inbox store itself failed (database down): the handler's work rolled back; try again.
        this.#error('inbox', err);
        if (!(await run.wait(Math.min(30_000, 200 * 2 ** Math.min(failures++, 8))))) return null;
        continue;
      }
      if (outcome.status !== 'retry') return outcome;
      this.stats.retried++;
      if (outcome.delayMs > RETRY_IN_PLACE_MS) {
        run.backoff(outcome.delayMs);
        this.stats.paused++;
        this.events.fire('paused', { topic: run.topic, partition: run.partition, offset: m.offset, id: event.id, attempts: outcome.attempts, delayMs: outcome.delayMs });
        return null;
      }
      if (!(await run.wait(outcome.delayMs))) return null;
    }
  }

  /** Worker mode: stores the partition's events in the inbox queue in offset order, a chunk per transaction. */
  async #queueBatch(run: BatchRun, queue: InboxQueue): Promise<void> {
    let chunk: number[] = [];
    const flush = async (): Promise<boolean> => {
      if (chunk.length === 0) return true;
      const items = chunk;
      chunk = [];
      const started = performance.now();
      const events = items.map((i) => (run.parsed(i) as { event: OutboxEvent }).event);
      const refused = await run.retrying('queue', () => queue.receive(events), (op, err) => this.#error(op, err));
      if (refused === null) return false;
      const durationMs = performance.now() - started;
      const reasons = new Map(refused.map((r) => [r.index, r.reason]));
      for (let n = 0; n < items.length; n++) {
        const i = items[n]!;
        const reason = reasons.get(n);
        // The queue can never hold it: dead-lettered like an unreadable record, and committed past.
        if (reason !== undefined && !(await this.#reject(run, run.messages[i]!, reason))) return false;
        run.finish(i);
        if (reason !== undefined) continue;
        this.stats.queued++;
        this.events.fire('settled', { topic: run.topic, partition: run.partition, offset: run.messages[i]!.offset, id: events[n]!.id, type: events[n]!.type, status: 'queued', durationMs });
      }
      await run.beat();
      if (run.commitDue()) await run.commit();
      return true;
    };
    for (let i = 0; i < run.messages.length && run.take(); i++) {
      this.stats.received++;
      const parsed = run.parsed(i);
      if (parsed.ok) {
        chunk.push(i);
        if (chunk.length >= QUEUE_CHUNK && !(await flush())) return;
        continue;
      }
      if (!(await flush()) || !(await this.#reject(run, run.messages[i]!, parsed.message))) return;
      run.finish(i);
    }
    await flush();
  }

  async #deadLetter(run: BatchRun, m: KafkaMessage, event: OutboxEvent, reason: string, attempts: number): Promise<boolean> {
    const target = this.#o.deadLetterTopics.get(run.topic) ?? null;
    if (target !== null && !(await this.#produceDead(run, m, target, reason, attempts))) return false;
    this.stats.dead++;
    this.#o.logger.warn(
      { groupId: this.#o.groupId, topic: run.topic, partition: run.partition, offset: m.offset, id: event.id, type: event.type, keyHash: keyHash(event.key), attempts, deadLetterTopic: target },
      'txbox kafka consumer: dead event dead-lettered; committing past it',
    );
    this.events.fire('deadLettered', { topic: run.topic, partition: run.partition, offset: m.offset, id: event.id, type: event.type, deadLetterTopic: target, attempts, reason });
    return true;
  }

  /** A record that is not a txbox event: logged by offset (never its content), copied to the dead-letter topic, committed past. */
  async #reject(run: BatchRun, m: KafkaMessage, reason: string): Promise<boolean> {
    const target = this.#o.deadLetterTopics.get(run.topic) ?? null;
    this.#o.logger.warn({ groupId: this.#o.groupId, topic: run.topic, partition: run.partition, offset: m.offset, reason, deadLetterTopic: target }, 'txbox kafka consumer: unreadable record; dead-lettering it and committing past it');
    if (target !== null && !(await this.#produceDead(run, m, target, `unreadable record: ${reason}`, null))) return false;
    this.stats.rejected++;
    this.events.fire('rejected', { topic: run.topic, partition: run.partition, offset: m.offset, deadLetterTopic: target, reason });
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
    return (await run.retrying('dead-letter', send, (op, err) => this.#error(op, err))) !== null;
  }

  #error(operation: string, err: unknown): void {
    const message = messageOf(err);
    this.events.fire('error', { operation, message });
    this.#o.logger.warn({ groupId: this.#o.groupId, operation, err: message }, 'txbox kafka consumer: operation failed; retrying');
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

/** True when `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
