import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { FiringEmitter, keyHash } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { HealthReport } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { ConsumerCore, within, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore, type DeliveryPort } from '../../inbox/consumer/delivery-core.ts';
import { resolveRabbitMqConsumerOptions, type RabbitMqConsumerOptions, type ResolvedRabbitMqConsumerOptions, type ResolvedRabbitMqConsumerQueue } from './rabbitmq-consumer-options.ts';
import { RabbitMqConnection, type ConnectionHooks } from './rabbitmq-connection.ts';
import { decodeRabbitMqMessage } from './rabbitmq-message.ts';
import { closeReason, REPLY, scrub, type CloseReason } from './rabbitmq-outcomes.ts';
import { thrownText } from '../../core/error-text.ts';

export type RabbitMqSettledStatus = 'processed' | 'duplicate' | 'ignored' | 'held' | 'dead' | 'queued';

/** Lifecycle events of a RabbitMqConsumer. `url` is always the redacted URL. */
export interface RabbitMqConsumerEvents {
  connected: { readonly url: string; readonly reconnected: boolean };
  disconnected: { readonly url: string; readonly reason: string };
  reconnecting: { readonly url: string; readonly attempt: number; readonly delayMs: number; readonly reason: string };
  /** Consuming every queue on a channel: at start, and again after a reconnect or a channel error (`resumed`). */
  subscribed: { readonly url: string; readonly queues: readonly string[]; readonly resumed: boolean };
  /** The broker closed the consuming channel (e.g. 406 delivery acknowledgement timed out); unacked messages are redelivered on the next one. */
  'channel-closed': { readonly url: string; readonly code: number | null; readonly reason: string };
  /** A message's event was settled, then acked (dead: rejected to the dead-letter exchange). `durationMs`: handing it to the inbox or queue until that committed; `waitedMs`: receipt until then. */
  settled: {
    readonly queue: string;
    readonly id: string;
    readonly type: string;
    readonly status: RabbitMqSettledStatus;
    readonly redelivered: boolean;
    readonly durationMs: number;
    readonly waitedMs: number;
  };
  /** A message that is not a readable txbox event; rejected without requeue (to the dead-letter exchange). */
  rejected: { readonly queue: string; readonly messageId: string | null; readonly reason: string };
  /** A dead event was rejected without requeue, so the queue's dead-letter exchange takes it. */
  'dead-lettered': { readonly queue: string; readonly id: string; readonly type: string; readonly deadLetterExchange: string; readonly attempts: number };
  /** The broker cancelled consumption of a queue (deleted, or its node went away); it is resumed when the queue is back. */
  cancelled: { readonly queue: string };
  /** A broker or database operation failed; it is retried. */
  error: ConsumerErrorEvent;
}

/** The consumer's typed event emitter: `consumer.events.on('settled', ...)`. */
export class RabbitMqConsumerEmitter extends FiringEmitter<RabbitMqConsumerEvents> {}

/** Counters since construction. `released`: deliveries left unacked (channel lost, or stop), which the broker redelivers. */
export interface RabbitMqConsumerStats extends ConsumerCounts {
  redelivered: number;
  acked: number;
  released: number;
}

/** One consuming channel; a new one after each reconnect or channel error. Delivery tags are only valid on their own channel. */
interface Subscription {
  readonly model: ChannelModel;
  readonly channel: Channel;
  readonly tags: Map<string, ResolvedRabbitMqConsumerQueue>;
  closed: boolean;
  /** Closed by stop(): not an error. */
  closing: boolean;
  reason: CloseReason | null;
}

interface Delivery {
  readonly sub: Subscription;
  readonly queue: ResolvedRabbitMqConsumerQueue;
  readonly message: ConsumeMessage;
  readonly event: OutboxEvent;
  readonly receivedAt: number;
  /** Aborted when the channel is gone or on stop: a handler not yet started, or waiting to retry, leaves the message for redelivery. */
  readonly controller: AbortController;
}


/**
 * Consumes RabbitMQ queues with manual acks and a prefetch window, and hands
 * each message's event to an inbox: one key's events run in order, different
 * keys in parallel. A message is acked only after the inbox committed; a
 * dead event is rejected without requeue, so the queue's dead-letter exchange
 * takes it; an unreadable message too, without reaching the inbox. The
 * connection and the channel come back by themselves; messages left unacked
 * are redelivered by the broker and the inbox skips those it already
 * committed. See docs/transports/rabbitmq.md#consuming.
 *
 * @example
 * const consumer = new RabbitMqConsumer({ url: process.env.AMQP_URL!, queues: ['billing.orders'], inbox, assertQueues: true });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class RabbitMqConsumer implements Consumer {
  readonly name = 'rabbitmq';
  readonly events = new RabbitMqConsumerEmitter();
  readonly stats: RabbitMqConsumerStats = { received: 0, redelivered: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, dead: 0, queued: 0, rejected: 0, acked: 0, released: 0 };
  readonly #o: ResolvedRabbitMqConsumerOptions;
  readonly #deliveries: DeliveryCore<Delivery>;
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #core: ConsumerCore;
  #connection: RabbitMqConnection | null = null;
  #sub: Subscription | null = null;
  #subscribing: Promise<void> | null = null;
  #attempt = 0;
  #keepAlive: NodeJS.Timeout | undefined;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: RabbitMqConsumerOptions) {
    this.#o = resolveRabbitMqConsumerOptions(options);
    this.#core = new ConsumerCore({
      name: 'rabbitmq',
      prefix: 'rabbitmq consumer',
      logger: this.#o.logger,
      context: () => ({ url: this.#o.connection.display }),
      onError: (operation, message) => this.events.fire('error', { operation, message }),
      connected: () => this.#sub !== null && !this.#sub.closed,
      describe: (err) => {
        const reason = closeReason(err);
        return reason ? `${reason.code} ${reason.text}` : scrub(thrownText(err));
      },
      logOncePerOutage: true,
    });
    this.#deliveries = new DeliveryCore<Delivery>({
      core: this.#core,
      handler: this.#o.handler,
      concurrency: this.#o.concurrency,
      // Worker mode: what arrived meanwhile (at most the prefetch window) is stored in one transaction.
      batch: this.#o.prefetch,
      port: this.#port(),
      hooks: {
        settled: (d, _event, status, durationMs) => {
          this.stats[status]++;
          this.#fireSettled(d, status, durationMs);
        },
        rejected: (d, reason) => {
          this.stats.rejected++;
          this.events.fire('rejected', { queue: d.queue.name, messageId: d.event.id, reason });
        },
      },
    });
  }

  get #state(): ConsumerCore['state'] {
    return this.#core.state;
  }

  /** Running, connected, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
  }

  /** Messages received and not yet acked, rejected or released. */
  get inFlight(): number {
    return this.#deliveries.inFlight;
  }

  /**
   * Connects (one attempt, bounded by connectTimeoutMs), checks that every
   * queue exists (or declares them with `assertQueues`) and starts consuming.
   * Throws ConfigError naming `url` (refused login,
   * unknown vhost, missing permission), `queues` (a missing queue),
   * `assertQueues` or `deadLetterExchange` (existing with other settings);
   * never the password.
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(signal?: AbortSignal): Promise<void> {
    return this.#core.start(() => this.#start(signal ?? AbortSignal.timeout(this.#o.connection.connectTimeoutMs * 3)), undefined, signal);
  }

  /**
   * Cancels consumption, lets handlers in progress commit and ack (a message
   * waiting for its key, a slot or a retry is left for redelivery), then
   * closes the channel and the connection. Handlers not done within
   * `stopTimeoutMs` are not waited for: their messages are redelivered and
   * the inbox skips those that committed.
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#stopNow(), false);
  }

  async #start(signal: AbortSignal): Promise<void> {
    const connection = new RabbitMqConnection(this.#o.connection, this.#hooks());
    this.#connection = connection;
    try {
      await connection.open(signal);
      const model = connection.model!;
      await this.#prepare(model).catch((err: unknown) => {
        throw this.#startError(err);
      });
      await this.#subscribe(model, false).catch((err: unknown) => {
        throw this.#startError(err);
      });
    } catch (err) {
      this.#connection = null;
      await connection.close();
      throw err;
    }
    // The connection's reconnect timer does not hold the process open: this does, as a listening server would, until stop().
    this.#keepAlive = setInterval(() => {}, 1 << 30);
  }

  /** Declares the queues and their dead-letter topology (`assertQueues`), or checks that the queues exist, on a channel of its own. */
  async #prepare(model: ChannelModel, only?: ResolvedRabbitMqConsumerQueue): Promise<void> {
    const o = this.#o;
    const channel = await model.createChannel();
    channel.on('error', () => {}); // the failed call below reports it
    try {
      for (const q of only ? [only] : o.queues) {
        if (!o.assertQueues) {
          await about({ queue: q.name }, channel.checkQueue(q.name));
          continue;
        }
        const type = o.queueArguments['x-queue-type'];
        await about({ exchange: q.deadLetterExchange }, channel.assertExchange(q.deadLetterExchange, 'direct', { durable: true }));
        await about({ queue: q.deadLetterQueue }, channel.assertQueue(q.deadLetterQueue, { durable: true, arguments: type === undefined ? {} : { 'x-queue-type': type } }));
        await about({ queue: q.deadLetterQueue }, channel.bindQueue(q.deadLetterQueue, q.deadLetterExchange, q.deadLetterQueue));
        const args = { ...o.queueArguments, 'x-dead-letter-exchange': q.deadLetterExchange, 'x-dead-letter-routing-key': q.deadLetterQueue };
        await about({ queue: q.name }, channel.assertQueue(q.name, { durable: true, arguments: args }));
      }
    } finally {
      await channel.close().catch(() => {});
    }
  }

  /** Opens the consuming channel, sets the prefetch window and consumes every queue on it. */
  async #subscribe(model: ChannelModel, resumed: boolean): Promise<void> {
    const o = this.#o;
    const channel = await model.createChannel();
    const sub: Subscription = { model, channel, tags: new Map(), closed: false, closing: false, reason: null };
    channel.on('error', (err: Error) => {
      sub.reason = closeReason(err) ?? { code: 0, text: scrub(err.message) };
    });
    channel.on('close', () => this.#closed(sub));
    this.#sub = sub;
    try {
      await channel.prefetch(o.prefetch, false);
      for (const q of o.queues) {
        const { consumerTag } = await about({ queue: q.name }, channel.consume(q.name, (m) => this.#onMessage(sub, q, m), { noAck: false }));
        sub.tags.set(consumerTag, q);
      }
    } catch (err) {
      sub.closing = true;
      if (this.#sub === sub) this.#sub = null;
      await channel.close().catch(() => {});
      throw err;
    }
    this.#attempt = 0;
    const url = o.connection.display;
    o.logger.info({ url, queues: o.queues.map((q) => q.name), prefetch: o.prefetch, resumed }, resumed ? 'rabbitmq consumer: consuming again' : 'rabbitmq consumer: consuming');
    this.events.fire('subscribed', { url, queues: o.queues.map((q) => q.name), resumed });
  }

  /** A consuming channel closed: its deliveries are void (the broker requeues them), and a new channel takes over. */
  #closed(sub: Subscription): void {
    if (sub.closed) return;
    sub.closed = true;
    if (this.#sub === sub) this.#sub = null;
    for (const d of this.#deliveries.held()) if (d.sub === sub) d.controller.abort();
    if (sub.closing || this.#state !== 'running') return;
    const url = this.#o.connection.display;
    // Without a reason of its own, the channel went down with the connection: `disconnected` tells that.
    if (sub.reason) {
      this.#o.logger.warn({ url, code: sub.reason.code, reason: sub.reason.text }, 'rabbitmq consumer: the broker closed the channel; unacked messages are redelivered on a new one');
      this.events.fire('channel-closed', { url, code: sub.reason.code, reason: sub.reason.text });
    }
    this.#schedule(() => this.#resubscribe(), this.#backoff());
  }

  /** After a reconnect or a channel error: declares or checks the queues again, then consumes on a new channel. Retries with backoff. */
  #resubscribe(): void {
    if (this.#state !== 'running' || this.#sub || this.#subscribing) return;
    const model = this.#connection?.model;
    if (!model) return; // reconnecting: the connected hook calls again
    this.#subscribing = (async () => {
      try {
        if (this.#o.assertQueues) await this.#prepare(model);
        await this.#subscribe(model, true);
        this.#recovered('subscribe');
      } catch (err) {
        this.#report('subscribe', err);
        this.#attempt++;
        this.#schedule(() => this.#resubscribe(), this.#backoff());
      }
    })().finally(() => {
      this.#subscribing = null;
    });
  }

  #onMessage(sub: Subscription, queue: ResolvedRabbitMqConsumerQueue, message: ConsumeMessage | null): void {
    try {
      if (message === null) this.#cancelled(sub, queue);
      else this.#accept(sub, queue, message);
    } catch (err) {
      // Never throw into amqplib's frame handler: it would take the connection down.
      this.#report('receive', err);
    }
  }

  #accept(sub: Subscription, queue: ResolvedRabbitMqConsumerQueue, message: ConsumeMessage): void {
    // While stopping (or on a channel already gone) the message stays unacked: the broker requeues it when the channel closes.
    if (sub.closed || this.#state === 'stopping' || this.#state === 'stopped') return;
    this.stats.received++;
    if (message.fields.redelivered) this.stats.redelivered++;
    const decoded = decodeRabbitMqMessage(message);
    if (!decoded.ok) return this.#reject(sub, queue, message, decoded.message);
    const d: Delivery = { sub, queue, message, event: decoded.event, receivedAt: performance.now(), controller: new AbortController() };
    this.#deliveries.accept(d, decoded);
  }

  /** The broker port of the shared DeliveryCore: ack, reject to the dead-letter exchange, leave for redelivery. */
  #port(): DeliveryPort<Delivery> {
    return {
      signal: (d) => d.controller.signal,
      ack: (d) => void this.#settle(d, 'ack'),
      deadLetter: (d, reason, _event, attempts) => {
        const { queue, event } = d;
        if (attempts === null) {
          // The inbox queue can never hold it: rejected to the dead-letter exchange, never retried.
          this.#o.logger.warn({ queue: queue.name, id: event.id, reason, deadLetterExchange: queue.deadLetterExchange }, 'rabbitmq consumer: the inbox queue refused a message; rejected to the dead-letter exchange');
          this.#settle(d, 'reject');
          return true;
        }
        this.#o.logger.warn(
          { queue: queue.name, id: event.id, type: event.type, keyHash: keyHash(event.key), attempts, deadLetterExchange: queue.deadLetterExchange },
          'rabbitmq consumer: event is dead; rejected to the dead-letter exchange',
        );
        if (this.#settle(d, 'reject')) {
          this.events.fire('dead-lettered', { queue: queue.name, id: event.id, type: event.type, deadLetterExchange: queue.deadLetterExchange, attempts });
        }
        // A channel gone meanwhile counted it as released: the broker redelivers it.
        return true;
      },
      release: () => void this.stats.released++,
    };
  }

  /** Acks (or rejects to the dead-letter exchange) on the channel that delivered it. False when that channel is gone: the broker redelivers. */
  #settle(d: Delivery, how: 'ack' | 'reject'): boolean {
    if (d.sub.closed) {
      this.stats.released++;
      return false;
    }
    try {
      if (how === 'ack') d.sub.channel.ack(d.message);
      else d.sub.channel.nack(d.message, false, false);
      this.stats.acked++;
      return true;
    } catch (err) {
      // The channel is closing: the message comes back, and the inbox skips it if it committed.
      this.#report('ack', err);
      this.stats.released++;
      return false;
    }
  }

  /** An unreadable message: rejected without requeue (to the dead-letter exchange, if any), never retried, never reaching the inbox. */
  #reject(sub: Subscription, queue: ResolvedRabbitMqConsumerQueue, message: ConsumeMessage, reason: string): void {
    this.stats.rejected++;
    const raw = message.properties.messageId as unknown;
    const messageId = typeof raw === 'string' && raw !== '' ? raw.slice(0, 200) : null;
    this.#o.logger.warn(
      { queue: queue.name, messageId, bytes: message.content.length, reason, deadLetterExchange: queue.deadLetterExchange },
      'rabbitmq consumer: unreadable message rejected to the dead-letter exchange',
    );
    this.events.fire('rejected', { queue: queue.name, messageId, reason });
    try {
      sub.channel.nack(message, false, false);
    } catch (err) {
      this.#report('reject', err);
    }
  }

  /** The broker cancelled one queue's consumer (queue deleted, node down): consume it again once it is back, on the same channel. */
  #cancelled(sub: Subscription, queue: ResolvedRabbitMqConsumerQueue): void {
    for (const [tag, q] of sub.tags) if (q === queue) sub.tags.delete(tag);
    if (sub.closed || this.#state !== 'running') return;
    this.#o.logger.warn({ url: this.#o.connection.display, queue: queue.name }, 'rabbitmq consumer: the broker cancelled consumption of a queue; resuming when it is back');
    this.events.fire('cancelled', { queue: queue.name });
    const retry = (attempt: number): void => {
      this.#schedule(async () => {
        if (sub.closed || this.#state !== 'running') return; // a new channel consumes every queue anyway
        try {
          // Checked on another channel first: a 404 on this one would close it for every queue.
          await this.#prepare(sub.model, queue);
          const { consumerTag } = await sub.channel.consume(queue.name, (m) => this.#onMessage(sub, queue, m), { noAck: false });
          sub.tags.set(consumerTag, queue);
          this.#recovered(`consume ${queue.name}`);
        } catch (err) {
          this.#report(`consume ${queue.name}`, err);
          retry(attempt + 1);
        }
      }, this.#backoff(attempt));
    };
    retry(0);
  }

  async #stopNow(): Promise<void> {
    const o = this.#o;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    await this.#subscribing;
    const sub = this.#sub;
    if (sub && !sub.closed) {
      await within(Promise.allSettled([...sub.tags.keys()].map((tag) => sub.channel.cancel(tag))), Math.min(5000, o.stopTimeoutMs));
    }
    // Messages not yet started, or waiting to retry, are left for redelivery; handlers in progress finish and ack.
    this.#core.abort();
    for (const d of this.#deliveries.held()) d.controller.abort();
    if (!(await within(this.#deliveries.onIdle(), o.stopTimeoutMs))) {
      o.logger.warn({ url: o.connection.display, inFlight: this.#deliveries.inFlight }, 'rabbitmq consumer: stop timed out; unfinished messages are redelivered');
    }
    if (sub && !sub.closed) {
      sub.closing = true;
      // The close goes out after the acks written before it, so those are settled.
      await sub.channel.close().catch(() => {});
    }
    this.#sub = null;
    const connection = this.#connection;
    this.#connection = null;
    await connection?.close();
    clearInterval(this.#keepAlive);
  }

  #hooks(): ConnectionHooks {
    const url = this.#o.connection.display;
    const log = this.#o.logger;
    return {
      connected: (_model, reconnected) => {
        log.info({ url, reconnected }, reconnected ? 'rabbitmq consumer: reconnected' : 'rabbitmq consumer: connected');
        this.events.fire('connected', { url, reconnected });
        if (reconnected) this.#resubscribe();
      },
      disconnected: (reason) => {
        log.warn({ url, reason, inFlight: this.#deliveries.inFlight }, 'rabbitmq consumer: lost the connection; unacked messages are redelivered after the reconnect');
        this.events.fire('disconnected', { url, reason });
      },
      reconnecting: (attempt, delayMs, reason) => {
        log.info({ url, attempt, delayMs, reason }, 'rabbitmq consumer: reconnecting');
        this.events.fire('reconnecting', { url, attempt, delayMs, reason });
      },
      // A memory or disk alarm blocks publishers; acks still flow.
      blocked: (reason) => log.debug({ url, reason }, 'rabbitmq consumer: connection blocked by a resource alarm'),
      unblocked: () => log.debug({ url }, 'rabbitmq consumer: connection unblocked'),
    };
  }

  /** What start() throws for a failed declaration, check or consume: a ConfigError naming the setting to fix. */
  #startError(err: unknown): Error {
    if (err instanceof ConfigError) return err;
    const url = this.#o.connection.display;
    const reason = closeReason(err);
    const said = reason ? `${reason.code} ${reason.text}` : scrub(thrownText(err));
    const { queue, exchange } = (err ?? {}) as { queue?: string; exchange?: string };
    const what = queue !== undefined ? `queue ${JSON.stringify(queue)}` : exchange !== undefined ? `exchange ${JSON.stringify(exchange)}` : 'the queues';
    const options = { cause: err };
    switch (reason?.code) {
      case REPLY.NOT_FOUND:
        return new ConfigError('queues', `${what} does not exist at ${url} (${said}); declare it with a dead-letter exchange (docs/transports/rabbitmq.md#consuming), fix queues, or set assertQueues: true`, options);
      case REPLY.ACCESS_REFUSED:
        return new ConfigError('url', `RabbitMQ at ${url} refused access to ${what} (${said}); grant the user in url read permission on the queues (and configure, with assertQueues)`, options);
      case REPLY.PRECONDITION_FAILED:
        if (exchange !== undefined) return new ConfigError('deadLetterExchange', `${what} exists with another type (${said}); name another dead-letter exchange`, options);
        return new ConfigError('assertQueues', `${what} exists with other arguments (${said}); turn assertQueues off and give the queue a dead-letter exchange by policy (docs/transports/rabbitmq.md#dead-letters), or change queueArguments to match`, options);
      case 405:
        return new ConfigError('queues', `${what} is exclusive to another connection (${said})`, options);
      default:
        return new ConfigError('url', `cannot consume from ${what} at ${url} (${said})`, options);
    }
  }

  #fireSettled(d: Delivery, status: RabbitMqSettledStatus, durationMs: number): void {
    const now = performance.now();
    const { event, queue, message } = d;
    this.events.fire('settled', { queue: queue.name, id: event.id, type: event.type, status, redelivered: message.fields.redelivered, durationMs, waitedMs: now - d.receivedAt });
  }

  #schedule(fn: () => unknown, delayMs: number): void {
    if (this.#state !== 'running') return;
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      void fn();
    }, delayMs);
    this.#timers.add(timer);
  }

  /** The reconnect delays of the connection: doubling from reconnectInitialDelayMs to reconnectMaxDelayMs, jittered over the upper half. */
  #backoff(attempt = this.#attempt): number {
    const { reconnectInitialDelayMs: initial, reconnectMaxDelayMs: max } = this.#o.connection;
    const ceiling = Math.min(max, initial * 2 ** Math.min(attempt, 30));
    return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
  }

  /** Reports a failure: an `error` event each time, a log line once per outage of that operation. */
  #report(operation: string, err: unknown): void {
    this.#core.failed(operation, err);
  }

  #recovered(operation: string): void {
    this.#core.recovered(operation);
  }
}

/** Tags a broker error with the queue or exchange it was about, for start()'s message. */
function about<T>(what: { queue?: string; exchange?: string }, promise: Promise<T>): Promise<T> {
  return promise.catch((err: unknown) => {
    throw err instanceof Error ? Object.assign(err, what) : err;
  });
}
