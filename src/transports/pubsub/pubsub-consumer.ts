import { Duration, type Message, type PubSub, type Subscription, type Topic } from '@google-cloud/pubsub';
import { FiringEmitter, keyHash } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { HealthReport, HealthSource } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { backoffMs, ConsumerCore, within, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore, keptNowhere, type SettledStatus } from '../../inbox/consumer/delivery-core.ts';
import { resolvePubSubConsumerOptions, type PubSubConsumerOptions, type ResolvedPubSubConsumerOptions } from './pubsub-consumer-options.ts';
import { parsePubSubMessage } from './pubsub-message.ts';
import { clientOf, errorText, withinConnectTimeout } from './pubsub-outcomes.ts';

export { resolvePubSubConsumerOptions, type PubSubConsumerOptions, type ResolvedPubSubConsumerOptions } from './pubsub-consumer-options.ts';

/** Events of a PubSubConsumer, for metrics and logs. Never carry payloads. */
export interface PubSubConsumerEvents {
  /** A message's event committed (inbox or queue); the message is acked next. `deliveryAttempt`: 0 unless the subscription has a dead-letter policy. */
  settled: { readonly messageId: string; readonly id: string; readonly type: string; readonly status: SettledStatus; readonly deliveryAttempt: number; readonly durationMs: number };
  /** A message that is not a readable txbox event (or that the inbox queue refused); it is dead-lettered. */
  rejected: { readonly messageId: string; readonly reason: string };
  /** A message was copied to `deadLetterTopic` (null: not copied) and acked. `id`: the event id when readable. */
  deadLettered: { readonly messageId: string; readonly id: string | null; readonly deadLetterTopic: string | null; readonly reason: string };
  /** A message was nacked (stop, or its handler was waiting to retry): Pub/Sub delivers it again. */
  released: { readonly messageId: string };
  /** An ack of an exactly-once subscription failed: Pub/Sub delivers the message again and the inbox skips it. */
  ackFailed: { readonly messageId: string; readonly message: string };
  /** A Pub/Sub, inbox or queue operation failed; it is retried. */
  error: ConsumerErrorEvent;
}

/** The typed emitter of `PubSubConsumer.events`. */
export class PubSubConsumerEmitter extends FiringEmitter<PubSubConsumerEvents> {}

/** Counters since construction. */
export interface PubSubConsumerStats extends ConsumerCounts {
  released: number;
  acked: number;
  ackFailed: number;
}

/** What start() learned about the subscription. */
export interface PubSubSubscriptionInfo {
  readonly topic: string;
  readonly exactlyOnceDelivery: boolean;
  readonly messageOrdering: boolean;
  /** The subscription's own dead-letter policy, if any. */
  readonly deadLetterPolicy: { readonly topic: string; readonly maxDeliveryAttempts: number } | null;
  readonly ackDeadlineSeconds: number;
}

/**
 * Pulls a Pub/Sub subscription (StreamingPull) and hands each message's
 * event to an inbox, acking only after the inbox committed. One key's
 * messages run one at a time in arrival order (the subscription's order,
 * when it has message ordering), different keys in parallel. The client
 * extends each message's ack deadline while its handler runs (up to
 * `maxExtensionMs`). On a subscription with exactly-once delivery, acks are
 * confirmed by Pub/Sub; otherwise, and when a confirmation fails, a
 * redelivered message is skipped by the inbox. Dead events and unreadable
 * messages are copied to `deadLetterTopic` and acked. Only the adapter lives
 * here; the receive, settle, ack loop is the shared DeliveryCore.
 * See docs/transports/pubsub.md#consuming.
 *
 * @example
 * const consumer = new PubSubConsumer({ projectId: 'shop', subscription: 'billing-orders', inbox, deadLetterTopic: 'billing-dead' });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class PubSubConsumer implements Consumer, HealthSource {
  readonly name = 'pubsub';
  /** Lifecycle events: `consumer.events.on('deadLettered', ...)`. */
  readonly events = new PubSubConsumerEmitter();
  readonly stats: PubSubConsumerStats = { received: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, queued: 0, dead: 0, rejected: 0, released: 0, acked: 0, ackFailed: 0 };
  readonly #o: ResolvedPubSubConsumerOptions;
  readonly #core: ConsumerCore;
  readonly #deliveries: DeliveryCore<Message>;
  #client: { readonly client: PubSub; readonly owned: boolean } | null = null;
  #subscription: Subscription | null = null;
  #deadTopic: Topic | null = null;
  #info: PubSubSubscriptionInfo | null = null;
  #reopen: NodeJS.Timeout | undefined;
  #reopenFailures = 0;
  /** Set while the client retries a StreamingPull stream that Pub/Sub does not answer (see #streamRetried). */
  #streamDown = false;
  #probing = false;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: PubSubConsumerOptions) {
    const o = (this.#o = resolvePubSubConsumerOptions(options));
    this.#core = new ConsumerCore({
      name: 'pubsub',
      logger: o.logger,
      context: () => ({ subscription: o.subscription }),
      onError: (operation, message) => this.events.fire('error', { operation, message }),
      connected: () => this.#subscription?.isOpen === true && !this.#streamDown,
      describe: errorText,
    });
    this.#deliveries = new DeliveryCore<Message>({
      core: this.#core,
      handler: o.handler,
      concurrency: o.concurrency,
      batch: o.batch,
      port: {
        ack: (m) => this.#ack(m),
        deadLetter: (m, reason, event, attempts, kept) => this.#deadLetter(m, reason, event, keptNowhere(o.handler, event, attempts, kept)),
        release: (m) => m.nack(),
        // The subscription's dead-letter policy forwards a message nacked on its maxDeliveryAttempts-th delivery.
        lastDelivery: (m) => {
          const policy = this.#info?.deadLetterPolicy;
          return policy != null && m.deliveryAttempt >= policy.maxDeliveryAttempts;
        },
      },
      hooks: {
        settled: (m, event, status, durationMs) => {
          this.stats[status]++;
          if (status === 'dead') return;
          this.events.fire('settled', { messageId: m.id, id: event.id, type: event.type, status, deliveryAttempt: m.deliveryAttempt, durationMs });
        },
        rejected: (m, reason) => {
          this.stats.rejected++;
          this.events.fire('rejected', { messageId: m.id, reason });
        },
        deadLettered: (m, event, reason) => {
          const deadLetterTopic = this.#o.deadLetterTopic;
          o.logger.warn({ subscription: o.subscription, messageId: m.id, id: event?.id, type: event?.type, keyHash: event ? keyHash(event.key) : undefined, deadLetterTopic }, 'txbox pubsub consumer: dead-lettered; acked');
          this.events.fire('deadLettered', { messageId: m.id, id: event?.id ?? null, deadLetterTopic, reason });
        },
        released: (m) => {
          this.stats.released++;
          this.events.fire('released', { messageId: m.id });
        },
      },
    });
  }

  /** What start() read from the subscription; null before. */
  get subscriptionInfo(): PubSubSubscriptionInfo | null {
    return this.#info;
  }

  /** Messages received and not yet acked, dead-lettered or nacked. */
  get inFlight(): number {
    return this.#deliveries.inFlight;
  }

  /**
   * Checks that the subscription (and `deadLetterTopic`) exist, reads its
   * settings (exactly-once delivery, ordering, dead-letter policy) and starts
   * pulling. Throws ConfigError naming `subscription`, `deadLetterTopic`,
   * `emulatorHost`, `clientConfig` or `projectId`.
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(): Promise<void> {
    return this.#core.start(
      () => this.#open(),
      () => this.#listen(),
    );
  }

  /**
   * Stops taking messages (those not yet started are nacked), lets handlers
   * in progress commit and ack within `stopTimeoutMs` (the rest are nacked),
   * flushes the acks and closes the stream.
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#close());
  }

  /** Running, the stream open, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
  }

  /**
   * Replays: seeks the subscription to a snapshot (its name) or a time.
   * Messages acked since then are delivered again; the inbox skips those it
   * committed (status `duplicate`), so only what it had not handled runs.
   * Seeking to a time needs `retainAckedMessages` on the subscription (the
   * emulator implements only snapshots). See docs/transports/pubsub.md#replay.
   */
  async seek(to: string | Date): Promise<void> {
    const sub = this.#subscription;
    if (!sub) throw new ConfigError('seek', 'the consumer is not running; start() it first');
    await sub.seek(to);
  }

  async #open(): Promise<void> {
    const o = this.#o;
    const c = o.connection;
    const client = clientOf(c);
    try {
      const sub = client.client.subscription(o.subscription, {
        flowControl: { maxMessages: o.maxMessages, allowExcessMessages: false },
        maxExtensionTime: Duration.from({ millis: o.maxExtensionMs }),
      });
      const [exists] = await withinConnectTimeout(c, `the check of subscription ${o.subscription}`, sub.exists());
      if (!exists) throw new ConfigError('subscription', `subscription ${o.subscription} does not exist at ${c.display}; create it (gcloud pubsub subscriptions create ${o.subscription} --topic=<topic> --enable-message-ordering) or fix subscription`);
      const [meta] = await withinConnectTimeout(c, `reading subscription ${o.subscription}`, sub.getMetadata());
      const dlp = meta.deadLetterPolicy;
      this.#info = Object.freeze({
        topic: meta.topic ?? '',
        exactlyOnceDelivery: meta.enableExactlyOnceDelivery === true,
        messageOrdering: meta.enableMessageOrdering === true,
        deadLetterPolicy: dlp?.deadLetterTopic ? { topic: dlp.deadLetterTopic, maxDeliveryAttempts: dlp.maxDeliveryAttempts ?? 5 } : null,
        ackDeadlineSeconds: meta.ackDeadlineSeconds ?? 10,
      });
      if (o.deadLetterTopic !== null) {
        const topic = client.client.topic(o.deadLetterTopic);
        const [dead] = await withinConnectTimeout(c, `the check of topic ${o.deadLetterTopic}`, topic.exists());
        if (!dead) throw new ConfigError('deadLetterTopic', `topic ${o.deadLetterTopic} does not exist at ${c.display}; create it, choose another deadLetterTopic, or set it to null to keep dead events only in the inbox`);
        this.#deadTopic = topic;
      }
      this.#subscription = sub;
    } catch (err) {
      if (client.owned) await client.client.close().catch(() => {});
      throw err;
    }
    this.#client = client;
    o.logger.info({ subscription: o.subscription, at: c.display, ...this.#info }, 'txbox pubsub consumer: started');
  }

  /** Attaching the listener opens the StreamingPull stream. */
  #listen(): void {
    const sub = this.#subscription!;
    sub.on('message', (m: Message) => this.#receive(m));
    sub.on('error', (err: unknown) => this.#core.failed('stream', err));
    // A stream that ends with a status the client retries (UNAVAILABLE, ...) is reopened by the client without an
    // 'error' or 'close': only its 'debug' messages tell. Without this, health() stayed ready while Pub/Sub was down.
    sub.on('debug', (msg: { message?: string; error?: unknown }) => {
      if (typeof msg.message === 'string' && / has ended with status \d+; will be retried/.test(msg.message)) this.#streamRetried(sub, msg.error);
    });
    // The client closes the stream after an error it does not retry: open it again, with backoff.
    sub.on('close', () => {
      if (!this.#core.running || this.#subscription !== sub) return;
      clearTimeout(this.#reopen);
      this.#reopen = setTimeout(() => {
        if (!this.#core.running) return;
        try {
          sub.open();
          this.#core.recovered('stream');
          this.#reopenFailures = 0;
        } catch (err) {
          this.#reopenFailures++;
          this.#core.failed('stream', err);
        }
      }, backoffMs(this.#reopenFailures++, 500, 30_000));
    });
  }

  #receive(m: Message): void {
    const parsed = parsePubSubMessage(m, this.#o.destination);
    // Arrived while stopping: back at once, for another consumer (recorded dead first on its last delivery).
    if (!this.#core.running) return this.#deliveries.releaseUnaccepted(m, parsed);
    this.stats.received++;
    if (this.#streamDown) this.#streamUp();
    this.#deliveries.accept(m, parsed);
  }

  async #ack(m: Message): Promise<void> {
    if (!this.#info?.exactlyOnceDelivery) {
      m.ack();
      this.stats.acked++;
      return;
    }
    try {
      // Exactly-once delivery: Pub/Sub confirms the ack, and will not redeliver after that.
      await m.ackWithResponse();
      this.stats.acked++;
    } catch (err) {
      // The ack id expired (a lease lost): the message comes back; the inbox skips it.
      this.stats.ackFailed++;
      this.events.fire('ackFailed', { messageId: m.id, message: errorText(err) });
      this.#core.failed('ack', err);
    }
  }

  /**
   * Copies the message to the dead-letter topic (retrying until stop), then
   * acks it. False: left for redelivery (nacked), which is also what becomes
   * of a dead event the inbox store refused to record when there is no topic
   * (nothing else would keep it): the subscription's own dead-letter policy,
   * if any, takes it after `maxDeliveryAttempts`. An unreadable message, or
   * an event no inbox can ever store, is acked with a warning, as before.
   */
  async #deadLetter(m: Message, reason: string, event: OutboxEvent | null, unrecorded: boolean): Promise<boolean> {
    const topic = this.#deadTopic;
    if (topic === null && event !== null && unrecorded) {
      this.#o.logger.error(
        { subscription: this.#o.subscription, messageId: m.id, id: event.id, type: event.type, reason },
        'txbox pubsub consumer: dead event the inbox could not record and deadLetterTopic is null: nacked for redelivery, never acked without a copy (set deadLetterTopic, or a dead-letter policy on the subscription)',
      );
      return false;
    }
    if (topic !== null) {
      const attributes: Record<string, string> = {};
      for (const [name, value] of Object.entries(m.attributes ?? {})) if (!name.toLowerCase().startsWith('txbox-dead-')) attributes[name] = value;
      const add = (name: string, value: string): void => void (attributes[name] = value.replace(/[\r\n]+/g, ' ').trim().slice(0, 1000) || 'unknown');
      add('txbox-dead-reason', reason);
      add('txbox-dead-subscription', this.#o.subscription);
      add('txbox-dead-message-id', m.id);
      add('txbox-dead-delivery-attempt', String(m.deliveryAttempt));
      if (m.orderingKey) add('txbox-dead-ordering-key', m.orderingKey);
      if ((await this.#core.retrying('dead-letter', () => topic.publishMessage({ data: m.data, attributes }))) === null) return false;
    } else if (event === null) {
      this.#o.logger.warn({ subscription: this.#o.subscription, messageId: m.id, reason }, 'txbox pubsub consumer: unreadable message acked without a copy (deadLetterTopic is null)');
    }
    await this.#ack(m);
    return true;
  }

  /**
   * Pub/Sub closes streams now and then (the client reopens them at once), so
   * a retried stream is not yet an outage: a metadata read tells. When it
   * fails, the consumer is not ready (health(), a warning once) until a read
   * succeeds again, tried every 2 s; a message received also ends it.
   */
  #streamRetried(sub: Subscription, cause: unknown): void {
    if (this.#probing) return;
    this.#probing = true;
    void this.#probe(sub, cause).finally(() => (this.#probing = false));
  }

  async #probe(sub: Subscription, cause: unknown): Promise<void> {
    while (this.#core.running && this.#subscription === sub) {
      try {
        await withinConnectTimeout(this.#o.connection, `reading subscription ${this.#o.subscription}`, sub.getMetadata());
        return this.#streamUp();
      } catch (err) {
        if (!this.#streamDown) {
          this.#streamDown = true;
          this.#core.failed('stream', cause ?? err);
        }
      }
      await new Promise((r) => setTimeout(r, 2_000).unref());
    }
  }

  #streamUp(): void {
    if (!this.#streamDown) return;
    this.#streamDown = false;
    this.#core.recovered('stream');
  }

  async #close(): Promise<void> {
    const o = this.#o;
    clearTimeout(this.#reopen);
    if (!(await within(this.#deliveries.onIdle(), o.stopTimeoutMs))) {
      o.logger.warn({ subscription: o.subscription, inFlight: this.#deliveries.inFlight }, `txbox pubsub consumer: stop timed out after ${o.stopTimeoutMs} ms (stopTimeoutMs); unfinished messages are nacked for redelivery`);
      this.#deliveries.releaseAll();
    }
    // Messages nacked on their last delivery are recorded dead in the inbox (each bounded) before the stream ends.
    await this.#deliveries.recordsSettled();
    const sub = this.#subscription;
    this.#subscription = null;
    this.#streamDown = false;
    // Flushes the acks and nacks sent so far, then ends the stream.
    await sub?.close().catch((err: unknown) => this.#core.failed('close', err));
    sub?.removeAllListeners();
    // And those that arrived while the stream ended.
    await this.#deliveries.recordsSettled();
    const client = this.#client;
    this.#client = null;
    this.#deadTopic = null;
    if (client?.owned) await client.client.close().catch(() => {});
    o.logger.info({ subscription: o.subscription }, 'txbox pubsub consumer: stopped');
  }
}
