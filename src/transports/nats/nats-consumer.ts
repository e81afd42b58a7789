import { brokerOutage } from '../../core/broker-outage.ts';
import { connect, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type Consumer as JsConsumer,
  type ConsumerConfig,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { FiringEmitter, keyHash } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import type { HealthReport } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { ConsumerCore, within, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore, keptNowhere, type Admission } from '../../inbox/consumer/delivery-core.ts';
import { durableChanges, durableConfig, pullExpiresMs, resolveNatsConsumerOptions, type NatsConsumerOptions, type ResolvedNatsConsumerOptions } from './nats-consumer-options.ts';
import { HEADER, natsMessageId, parseNatsMessage } from './nats-message.ts';
import { apiErrorOf, connectFailure, findError, jetStreamCheckFailure, messageOf } from './nats-outcomes.ts';
import { redactServer } from './nats-transport-options.ts';

export { filterSubjectProblem, resolveNatsConsumerOptions, type NatsConsumerOptions, type ResolvedNatsConsumerOptions } from './nats-consumer-options.ts';

export type NatsSettledStatus = 'processed' | 'duplicate' | 'ignored' | 'held' | 'queued';

/** Events of a NatsConsumer, for metrics and logs. Never carry payloads. */
export interface NatsConsumerEvents {
  /** A message's event committed (inbox or queue) and the message was acked. `durationMs`: from handing it to the inbox or queue until that committed. */
  settled: { readonly seq: number; readonly id: string; readonly type: string; readonly status: NatsSettledStatus; readonly deliveryCount: number; readonly durationMs: number };
  /** A message that is not a readable txbox event was terminated (`term()`); it stays in the stream. */
  rejected: { readonly seq: number; readonly msgId: string | null; readonly reason: string };
  /** A dead message (dead in the inbox, or delivered `maxDeliveries` times) was copied to `subject` (null: not copied) and terminated. */
  deadLettered: { readonly seq: number; readonly id: string; readonly type: string; readonly subject: string | null; readonly deliveryCount: number; readonly reason: string };
  /** A message left unacked by `stop()`: JetStream delivers it again after ack_wait. */
  released: { readonly seq: number; readonly id: string };
  /** The connection changed state; nats.js reconnects by itself. */
  connection: { readonly status: 'disconnect' | 'reconnect' | 'ldm' | 'error' | 'close'; readonly server?: string; readonly error?: string };
  /** A NATS, inbox or queue operation failed; it is retried while the message stays held (its key waits). */
  error: ConsumerErrorEvent;
}

/** The typed emitter of `NatsConsumer.events`. */
export class NatsConsumerEmitter extends FiringEmitter<NatsConsumerEvents> {}

/** Counters since construction. */
export interface NatsConsumerStats extends ConsumerCounts {
  released: number;
  /** `working()` calls that extended an ack deadline. */
  extended: number;
}

interface Session {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly owned: boolean;
  stopWatching: () => void;
}

/** A message this process holds: received, not yet acked, termed or released. */
interface Delivery {
  readonly m: JsMsg;
  /** The message's event id; null when unreadable. */
  readonly id: string | null;
  touchedAt: number;
}

/**
 * Consumes a JetStream stream with a durable pull consumer and hands each
 * message's event to an inbox, acking only after the inbox committed. One
 * key's messages run one at a time in stream order, different keys in
 * parallel. A failing handler is retried in place (its key waits, the
 * message's ack deadline is extended with `working()`), never nak'ed: a
 * nak would let the key's later messages overtake it. Dead events, and
 * messages delivered `maxDeliveries` times, are copied to the dead-letter
 * subject and terminated. Only the adapter lives here; the settle and ack
 * loop is the shared DeliveryCore. See docs/transports/nats.md#consuming.
 *
 * @example
 * const consumer = new NatsConsumer({ servers: 'nats://127.0.0.1:4222', stream: 'ORDERS', durable: 'billing', inbox });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class NatsConsumer implements Consumer {
  readonly name = 'nats';
  /** Lifecycle events: `consumer.events.on('deadLettered', ...)`. */
  readonly events = new NatsConsumerEmitter();
  readonly stats: NatsConsumerStats = { received: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, queued: 0, dead: 0, rejected: 0, released: 0, extended: 0 };
  readonly #o: ResolvedNatsConsumerOptions;
  readonly #deliveries: DeliveryCore<Delivery>;
  /**
   * Most messages held at once: a full pull plus every handler busy (worker
   * mode: a batch being stored plus the next), so that one process never
   * takes the whole max_ack_pending of the durable.
   */
  readonly #limit: number;
  /**
   * Keys with a released message (stop, a failed dead letter, a dead event
   * nothing else keeps): their later messages are released too, so none
   * overtakes it. Each with the lowest stream sequence released, whose
   * redelivery unblocks the key, and until when to wait for it here (another
   * process of the durable may get it instead).
   */
  readonly #releasedKeys = new Map<string, { readonly seq: number; readonly until: number }>();
  #session: Session | null = null;
  readonly #core: ConsumerCore;
  #messages: ConsumerMessages | null = null;
  #reading: Promise<void> | null = null;
  #heartbeat: NodeJS.Timeout | undefined;
  #acks: JsMsg[] = [];
  #ackTimer: NodeJS.Immediate | undefined;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: NatsConsumerOptions) {
    this.#o = resolveNatsConsumerOptions(options);
    const o = this.#o;
    this.#limit = Math.min(o.maxAckPending, o.batch + (o.handler.kind === 'inbox' ? o.concurrency : o.batch));
    this.#core = new ConsumerCore({
      name: 'nats',
      logger: o.logger,
      context: () => ({ stream: o.stream, durable: o.durable }),
      onError: (operation, message) => this.events.fire('error', { operation, message }),
      connected: () => this.#session !== null && !this.#session.nc.isClosed() && this.#connected,
      describe: messageOf,
      // JetStream not answering yet (the server starting, electing a leader) heals by waiting too.
      outage: (err) => brokerOutage(err) ?? (err instanceof TransportError && err.kind === 'retriable' ? err.message : null),
    });
    this.#deliveries = new DeliveryCore<Delivery>({
      core: this.#core,
      handler: o.handler,
      concurrency: o.concurrency,
      batch: o.batch,
      // What was received is settled at stop (one try each); a retry wait ends and releases.
      onStop: 'finish',
      port: {
        ack: (d) => this.#ack(d.m),
        deadLetter: (d, reason, event, attempts, kept) => this.#deadLetter(d, reason, event, keptNowhere(o.handler, event, attempts, kept)),
        // Left unacked, not nak()ed: see #released.
        release: () => {},
        // Delivered max_deliver times: JetStream will not deliver it again, so a release records it dead in the inbox.
        lastDelivery: (d) => d.m.info.deliveryCount >= o.maxDeliveries,
        // An unreadable message is terminated at once, whatever its delivery count.
        admit: (d, event) => (event === null ? 'handle' : this.#admit(d, event.key)),
      },
      hooks: {
        settled: (d, event, status, durationMs) => {
          if (status === 'dead') return;
          this.stats[status]++;
          this.events.fire('settled', { seq: d.m.seq, id: event.id, type: event.type, status, deliveryCount: d.m.info.deliveryCount, durationMs });
        },
        deadLettered: (d, event, reason) => {
          if (event === null) return; // unreadable: terminated and reported by #deadLetter
          this.stats.dead++;
          const o = this.#o;
          const deliveryCount = d.m.info.deliveryCount;
          o.logger.warn({ stream: o.stream, durable: o.durable, seq: d.m.seq, id: event.id, type: event.type, keyHash: keyHash(event.key), deliveryCount, deadLetterSubject: o.deadLetterSubject }, 'txbox nats consumer: dead-lettered');
          this.events.fire('deadLettered', { seq: d.m.seq, id: event.id, type: event.type, subject: o.deadLetterSubject, deliveryCount, reason });
        },
        released: (d, event) => this.#released(d, event),
      },
    });
  }

  #connected = true;

  get #state(): ConsumerCore['state'] {
    return this.#core.state;
  }

  /** Running, connected, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
  }

  /** Messages received and not yet acked, terminated or released. */
  get inFlight(): number {
    return this.#deliveries.inFlight;
  }

  /**
   * Connects (unless given a connection), checks that the stream exists and
   * that a stream other than it captures the dead-letter subject, creates
   * or updates the durable, and starts pulling. Throws ConfigError naming
   * `servers`, a credential option, `stream`, `durable`, `filterSubjects`
   * or `deadLetterSubject`.
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(): Promise<void> {
    return this.#core.start(
      () => this.#start(),
      () => (this.#reading = this.#readLoop(this.#session!)),
    );
  }

  /**
   * Stops pulling, lets the messages already received finish (commit and
   * ack; one waiting to retry is released at once, with its key's later
   * messages), within `stopTimeoutMs`, then drains and closes the connection
   * it opened. Messages not finished are left for redelivery.
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#stopNow());
  }

  async #start(): Promise<void> {
    const o = this.#o;
    this.#connected = true;
    this.#releasedKeys.clear();
    const session = await this.#connect();
    try {
      await this.#checkStream(session);
      await this.#checkDeadLetter(session);
      await this.#ensureConsumer(session);
    } catch (err) {
      session.stopWatching();
      if (session.owned) await session.nc.close().catch(() => {});
      throw err;
    }
    this.#session = session;
    const every = o.ackWaitMs / 3;
    this.#heartbeat = setInterval(() => this.#extend(every), Math.max(100, Math.floor(o.ackWaitMs / 6)));
    o.logger.info({ stream: o.stream, durable: o.durable, servers: o.transport.serversDisplay }, 'txbox nats consumer: started');
  }

  async #stopNow(): Promise<void> {
    const o = this.#o;
    this.#messages?.stop();
    const drained = (async () => {
      await this.#reading;
      await this.#deliveries.onIdle();
    })();
    if (!(await within(drained, o.stopTimeoutMs))) {
      const left = this.#deliveries.inFlight;
      this.#deliveries.releaseAll();
      o.logger.warn({ stream: o.stream, durable: o.durable, inFlight: left }, `txbox nats consumer: stop timed out after ${o.stopTimeoutMs} ms (stopTimeoutMs); unfinished messages are redelivered`);
    }
    clearInterval(this.#heartbeat);
    this.#flushAcks();
    // Messages released on their last delivery are recorded dead in the inbox (each bounded).
    await this.#deliveries.recordsSettled();
    const session = this.#session;
    this.#session = null;
    this.#messages = null;
    if (session) {
      session.stopWatching();
      // drain() flushes the acks just sent; a given connection only needs the flush.
      if (session.owned) await session.nc.drain().catch(() => session.nc.close().catch(() => {}));
      else await session.nc.flush().catch(() => {});
    }
    o.logger.info({ stream: o.stream, durable: o.durable }, 'txbox nats consumer: stopped');
  }

  async #connect(): Promise<Session> {
    const t = this.#o.transport;
    let nc: NatsConnection;
    if (t.connection) {
      if (t.connection.isClosed()) throw new ConfigError('connection', 'is closed; pass an open NatsConnection');
      nc = t.connection;
    } else {
      try {
        nc = await connect({ ...t.connect!, servers: [...(t.connect!.servers as string[])] });
      } catch (err) {
        throw connectFailure(err, t.serversDisplay, t.credentials, t.connect!.timeout ?? 0);
      }
    }
    const owned = t.connection === null;
    const timeout = this.#o.requestTimeoutMs;
    try {
      const jsm = await jetstreamManager(nc, { checkAPI: false, timeout });
      await jsm.getAccountInfo().catch((err: unknown) => {
        if (findError(err, 'TimeoutError')) {
          throw new TransportError('retriable', `JetStream at ${t.serversDisplay} did not answer within ${timeout} ms (requestTimeoutMs); it may be starting or electing a leader`, { cause: err });
        }
        throw jetStreamCheckFailure(err, t.serversDisplay, t.credentials, timeout);
      });
      const session: Session = { nc, jsm, js: jetstream(nc, { timeout }), owned, stopWatching: () => {} };
      this.#watch(session);
      return session;
    } catch (err) {
      if (owned) await nc.close().catch(() => {});
      throw err;
    }
  }

  /** Re-emits connection changes; reconnecting is nats.js's job (a pull open across it asks again, or ends and the read loop pulls again). */
  #watch(session: Session): void {
    const statuses = session.nc.status();
    session.stopWatching = () => (statuses as { stop?: () => void }).stop?.();
    void (async () => {
      for await (const s of statuses) {
        if (s.type === 'disconnect' || s.type === 'reconnect') this.#connected = s.type === 'reconnect';
        if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'ldm') {
          const server = redactServer(s.server);
          this.events.fire('connection', { status: s.type, server });
          this.#o.logger[s.type === 'reconnect' ? 'info' : 'warn']({ durable: this.#o.durable, server }, `txbox nats consumer: ${s.type}`);
        } else if (s.type === 'error') this.events.fire('connection', { status: 'error', error: messageOf(s.error) });
        else if (s.type === 'close') this.events.fire('connection', { status: 'close' });
      }
    })().catch(() => {});
  }

  async #checkStream(session: Session): Promise<void> {
    const { stream, transport: t } = this.#o;
    try {
      await session.jsm.streams.info(stream);
    } catch (err) {
      if (findError(err, 'StreamNotFoundError') || apiErrorOf(err)?.errCode === 10059) {
        throw new ConfigError('stream', `no JetStream stream named ${JSON.stringify(stream)} at ${t.serversDisplay}; create it (e.g. nats stream add ${stream} --subjects 'txbox.orders') or fix stream`, { cause: err });
      }
      throw this.#apiFailure(err, `reading stream ${stream}`);
    }
  }

  async #checkDeadLetter(session: Session): Promise<void> {
    const { deadLetterSubject: subject, stream, transport: t } = this.#o;
    if (subject === null) return;
    let captured: string;
    try {
      captured = await session.jsm.streams.find(subject);
    } catch (err) {
      if (findError(err, 'StreamNotFoundError')) {
        throw new ConfigError(
          'deadLetterSubject',
          `no stream at ${t.serversDisplay} captures ${subject}; create one (e.g. nats stream add TXBOX_DEAD --subjects 'txbox-dead.>'), or set deadLetterSubject: null to terminate dead messages without a copy`,
          { cause: err },
        );
      }
      throw this.#apiFailure(err, `finding the stream of ${subject}`);
    }
    if (captured === stream) {
      throw new ConfigError('deadLetterSubject', `${subject} is captured by ${stream}, the stream being consumed: dead messages would come back; choose a subject that another stream captures`);
    }
  }

  /** Creates the durable when missing; sets ack wait, max deliver, max ack pending and the filter when they differ. */
  async #ensureConsumer(session: Session): Promise<void> {
    const o = this.#o;
    let config: ConsumerConfig;
    try {
      config = (await session.jsm.consumers.info(o.stream, o.durable)).config;
    } catch (err) {
      if (!findError(err, 'ConsumerNotFoundError') && apiErrorOf(err)?.errCode !== 10014) throw this.#apiFailure(err, `reading durable ${o.durable}`);
      await session.jsm.consumers.add(o.stream, durableConfig(o)).catch((e: unknown) => {
        throw this.#consumerFailure(e, 'create');
      });
      o.logger.info({ stream: o.stream, durable: o.durable }, 'txbox nats consumer: created the durable');
      return;
    }
    const change = durableChanges(o, config);
    if (change === null) return;
    await session.jsm.consumers.update(o.stream, o.durable, change).catch((e: unknown) => {
      throw this.#consumerFailure(e, 'update');
    });
    o.logger.info({ stream: o.stream, durable: o.durable }, 'txbox nats consumer: updated the durable');
  }

  #consumerFailure(err: unknown, action: 'create' | 'update'): Error {
    const o = this.#o;
    if (findError(err, 'InvalidArgumentError') && /filter_subjects/.test(messageOf(err))) {
      return new ConfigError('filterSubjects', `several filter subjects need nats-server 2.10 or later (${messageOf(err)}); give one subject, or upgrade`, { cause: err });
    }
    const api = apiErrorOf(err);
    if (api && api.status < 500) {
      const field = /filter/i.test(api.description) ? 'filterSubjects' : 'durable';
      return new ConfigError(field, `JetStream refused to ${action} durable ${o.durable} on stream ${o.stream}: ${api.description} (err_code ${api.errCode})`, { cause: err });
    }
    return this.#apiFailure(err, `${action === 'create' ? 'creating' : 'updating'} durable ${o.durable}`);
  }

  #apiFailure(err: unknown, what: string): Error {
    const t = this.#o.transport;
    if (findError(err, 'PermissionViolationError')) {
      return new ConfigError(t.credentials ?? 'user/pass', `the NATS user may not use the JetStream API for ${what}; grant publish permission on $JS.API.> (and subscribe on _INBOX.>)`, { cause: err });
    }
    return new TransportError('retriable', `${what} at ${t.serversDisplay} failed: ${messageOf(err)}`, { cause: err });
  }

  /**
   * Pulls until stop(). Each pull request (a nats.js `fetch`) asks for no more
   * messages than the process has room for, and every message it brings is
   * taken at once, its ack deadline extended from then on until it is
   * settled. Never more: a message the server handed over and the client
   * left waiting (nats.js `consume()` keeps the rest of a pull buffered while
   * the reader is full) is not extended; past ack_wait the server delivers it
   * again, counting a delivery its handler never saw, and at maxDeliveries
   * it was dead-lettered unhandled. A pull waits for room for a quarter of
   * `batch`, so that a full process does not send a request per freed slot.
   */
  async #readLoop(session: Session): Promise<void> {
    const o = this.#o;
    const floor = Math.max(1, Math.floor(Math.min(o.batch, this.#limit) / 4));
    let consumer: JsConsumer | null = null;
    for (let failures = 0; this.#state === 'running'; ) {
      try {
        await this.#deliveries.whenBelow(this.#limit - floor + 1, this.#core.signal);
        if (this.#state !== 'running') break;
        consumer ??= await session.js.consumers.get(o.stream, o.durable);
        const messages = await consumer.fetch({ max_messages: Math.min(o.batch, this.#limit - this.#deliveries.inFlight), expires: pullExpiresMs(o) });
        this.#messages = messages;
        if (this.#state !== 'running') messages.stop();
        for await (const m of messages) {
          this.stats.received++;
          const parsed = parseNatsMessage(m);
          this.#deliveries.accept({ m, id: parsed.ok ? parsed.event.id : null, touchedAt: Date.now() }, parsed);
        }
        failures = 0;
      } catch (err) {
        if (this.#state !== 'running') break;
        failures++;
        this.#error('consume', err);
        consumer = null;
        // The durable deleted under a running consumer (an operator, memory storage after a restart) is created again.
        await this.#ensureConsumer(session).catch((e: unknown) => this.#error('consume', e));
      } finally {
        this.#messages = null;
      }
      if (this.#state === 'running' && failures > 0) await this.#core.pause(Math.min(10_000, 250 * 2 ** Math.min(failures - 1, 6)));
    }
  }

  /**
   * A message's turn came: dead-lettered when delivered too often (recorded
   * dead in the inbox first), else released behind a released one of its key
   * (worker mode: behind any). The count comes first: JetStream never
   * delivers a message again after its `max_deliver`-th delivery, so a
   * release of that one lost it.
   */
  #admit(d: Delivery, key: string): Admission {
    const o = this.#o;
    if (d.m.info.deliveryCount >= o.maxDeliveries) {
      // Worker mode without a dead-letter subject: storing it in the queue is its handling (no handler runs here),
      // and a termination, or a release (JetStream will not deliver it again), would leave nothing that keeps it.
      if (o.handler.kind === 'queue' && o.deadLetterSubject === null) return 'handle';
      return { deadLetter: `delivered ${d.m.info.deliveryCount} times without an ack (maxDeliveries ${o.maxDeliveries}); the handler did not run again` };
    }
    if (o.handler.kind === 'queue') return this.#releasedKeys.size > 0 ? 'release' : 'handle';
    const head = this.#releasedKeys.get(key);
    if (head === undefined) return 'handle';
    // The key's first released message, delivered again (a release while running: a dead event nothing else keeps,
    // left for redelivery), or not back by its deadline (it went to another process of the durable, where per-key
    // order between processes is not kept anyway): the key's turn again.
    if (d.m.seq !== head.seq && Date.now() < head.until) return 'release';
    this.#releasedKeys.delete(key);
    return 'handle';
  }

  /**
   * An unreadable message is terminated (it stays in the stream); a dead one
   * is copied to the dead-letter subject (retrying until stop; false: left
   * for redelivery) and terminated. Without a subject, a dead event that no
   * inbox row keeps (`only`: the store refused it) is left for redelivery,
   * never terminated without a copy: nothing else would keep it.
   */
  async #deadLetter(d: Delivery, reason: string, event: OutboxEvent | null, only: boolean): Promise<boolean> {
    const o = this.#o;
    if (event === null) {
      this.stats.rejected++;
      const msgId = natsMessageId(d.m);
      const why = reason.replace(/^unreadable message: /, '');
      this.#send(d.m, 'term');
      o.logger.warn({ stream: o.stream, seq: d.m.seq, msgId, reason: why }, 'txbox nats consumer: unreadable message terminated');
      this.events.fire('rejected', { seq: d.m.seq, msgId, reason: why });
      return true;
    }
    const subject = o.deadLetterSubject;
    if (subject === null && only) {
      o.logger.error(
        { stream: o.stream, durable: o.durable, seq: d.m.seq, id: event.id, type: event.type, reason },
        'txbox nats consumer: dead event the inbox could not record and deadLetterSubject is null: left for redelivery, never terminated without a copy (set deadLetterSubject, or fix what the inbox store refuses)',
      );
      return false;
    }
    if (subject !== null && (await this.#core.retrying('dead-letter', () => this.#publishDead(d.m, subject, reason))) === null) return false;
    this.#send(d.m, 'term');
    return true;
  }

  /**
   * The original body and headers (without `Nats-*` ones, which would steer
   * the dead-letter stream; `Nats-Msg-Id` is kept, so a second copy after a
   * crash is dropped by its duplicate window) plus `txbox-dead-*` headers.
   */
  async #publishDead(m: JsMsg, subject: string, reason: string): Promise<true> {
    const h = natsHeaders();
    for (const name of m.headers?.keys() ?? []) {
      if (name.toLowerCase().startsWith('nats-')) continue;
      for (const v of m.headers!.values(name)) h.append(name, v);
    }
    const add = (name: string, value: string): void => h.set(name, value.replace(/[\r\n]+/g, ' ').trim().slice(0, 1000));
    add('txbox-dead-reason', reason || 'unknown');
    add('txbox-dead-stream', this.#o.stream);
    add('txbox-dead-subject', m.subject);
    add('txbox-dead-seq', String(m.seq));
    add('txbox-dead-consumer', this.#o.durable);
    add('txbox-dead-deliveries', String(m.info.deliveryCount));
    const msgID = m.headers?.get(HEADER.msgId);
    const session = this.#session;
    if (!session) throw new Error('the consumer is stopped');
    await session.js.publish(subject, m.data, { headers: h, timeout: this.#o.requestTimeoutMs, ...(msgID ? { msgID } : {}) });
    return true;
  }

  /**
   * The message was left unacked: JetStream delivers it again after ack_wait.
   * Not nak(): nats-server 2.9 can then redeliver it with a delivery count
   * that was not increased (it went to this process's abandoned pull
   * request first), which would defeat maxDeliveries. The key's later
   * messages are released too, so none of them overtakes it, until the
   * first released one is delivered again (a release while running).
   */
  #released(d: Delivery, event: OutboxEvent | null): void {
    if (event !== null) {
      const head = this.#releasedKeys.get(event.key);
      // Redelivered after ack_wait; a pull request lives half of it (pullExpiresMs): three ack_waits are a wide margin.
      if (head === undefined || d.m.seq < head.seq) this.#releasedKeys.set(event.key, { seq: d.m.seq, until: Date.now() + 3 * this.#o.ackWaitMs });
    }
    this.stats.released++;
    this.events.fire('released', { seq: d.m.seq, id: event?.id ?? d.id ?? '' });
  }

  /** Acks of one event-loop turn leave in one socket write (nats.js coalesces what is sent in one tick). */
  #ack(m: JsMsg): void {
    this.#acks.push(m);
    this.#ackTimer ??= setImmediate(() => this.#flushAcks());
  }

  #flushAcks(): void {
    clearImmediate(this.#ackTimer);
    this.#ackTimer = undefined;
    for (const m of this.#acks.splice(0)) this.#send(m, 'ack');
  }

  #send(m: JsMsg, how: 'ack' | 'term'): void {
    try {
      if (how === 'ack') m.ack();
      else m.term();
    } catch (err) {
      // A closed connection: the message is redelivered, and the inbox recognizes it.
      if (this.#state === 'running') this.#error(how, err);
    }
  }

  /** Extends the ack deadline of every held message that has not been touched for `every` ms. */
  #extend(every: number): void {
    const now = Date.now();
    for (const d of this.#deliveries.held()) {
      if (now - d.touchedAt < every) continue;
      d.touchedAt = now;
      this.stats.extended++;
      safely(() => d.m.working());
    }
  }

  #error(operation: string, err: unknown): void {
    this.#core.failed(operation, err);
  }
}

function safely(fn: () => void): void {
  try {
    fn();
  } catch {
    // Only a closed connection throws here; the server redelivers the message.
  }
}
