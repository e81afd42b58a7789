import { brokerOutage, startDespiteOutage } from '../../core/broker-outage.ts';
import type { PubSub, Topic } from '@google-cloud/pubsub';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { buildPubSubMessage } from './pubsub-message.ts';
import { clientOf, publishFailure, withinConnectTimeout } from './pubsub-outcomes.ts';
import { resolvePubSubTransportOptions, type PubSubTransportOptions, type ResolvedPubSubTransportOptions } from './pubsub-transport-options.ts';
import { OutstandingLimit } from './pubsub-flow-control.ts';
import { thrownText } from '../../core/error-text.ts';

const ACK: PublishOutcome = Object.freeze({ ok: true });

/**
 * Publishes each event as one Pub/Sub message: data = the payload JSON,
 * ordering key = the event key, the envelope in `txbox-*` attributes and
 * the event's headers as attributes. An event counts as sent once Pub/Sub
 * acked it. All events of a call go out at once, batched by the client and
 * flushed at the end of the call. After a failed publish the client stops
 * that ordering key; the transport resumes it once the call's outcomes are
 * in, so the relay's retry goes out in order. Unavailable, deadline,
 * quota and internal errors are retriable; a missing topic (unroutable),
 * an oversize message and invalid attributes are permanent; refused
 * credentials are destination-down. Pub/Sub keeps every copy of a
 * re-published event: consumers dedup by id (the inbox does).
 * See docs/transports/pubsub.md.
 *
 * @example
 * const transport = new PubSubTransport({ projectId: 'shop', topics: { orders: 'shop-orders' } });
 * const relay = createRelay({ store, transport }); // relay.start() calls transport.start()
 */
export class PubSubTransport implements Transport {
  readonly name = 'pubsub';
  readonly #o: ResolvedPubSubTransportOptions;
  readonly #topics = new Map<string, Topic>();
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #limit: OutstandingLimit;
  #client: PubSub | null = null;
  #owned = false;
  #starting: Promise<void> | null = null;
  #closing: Promise<void> | null = null;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: PubSubTransportOptions) {
    this.#o = resolvePubSubTransportOptions(options);
    this.#limit = new OutstandingLimit(this.#o.flowControl.maxOutstandingMessages, this.#o.flowControl.maxOutstandingBytes);
  }

  /**
   * Creates the client and checks that every topic named in `topics`
   * exists. Throws ConfigError naming `topics.<destination>` (a missing
   * topic), `emulatorHost`, `clientConfig` or `projectId` (unreachable,
   * refused credentials). When Pub/Sub does not answer within
   * connectTimeoutMs or refuses the connection, it logs a warning and
   * resolves: the events wait as destination-down and the next publish
   * checks again. Reopens after `close()`.
   */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#closing) {
      await this.#closing;
      this.#closing = null;
    }
    const o = this.#o;
    // Unreachable: the first publish connects (the relay's probe); a missing topic or refused credentials still throw.
    await startDespiteOutage({ transport: 'pubsub', address: o.connection.display, logger: o.logger }, () => this.#connectOnce(), signal);
  }

  /** Creates the client and checks the topics unless done (concurrent calls share one attempt). */
  #connectOnce(): Promise<void> {
    if (this.#client) return Promise.resolve();
    this.#starting ??= this.#start().finally(() => (this.#starting = null));
    return this.#starting;
  }

  /**
   * Publishes every event and resolves with one outcome per event, in input
   * order, each after Pub/Sub's ack. Never rejects for a failed event.
   * Aborting `signal` stops the wait (outcomes retriable; messages may still
   * arrive, which at-least-once allows).
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing) {
      const error = new TransportError('retriable', 'the Pub/Sub transport is closed; call start() to reopen it');
      return Promise.resolve(events.map(() => ({ ok: false, error })));
    }
    const done = this.#publish(events, signal);
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for in-flight publishes, then closes the client it created (a `client` passed in is left open). */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #start(): Promise<void> {
    const c = this.#o.connection;
    const { client, owned } = clientOf(c);
    try {
      for (const [destination, name] of this.#o.topics) {
        const [exists] = await withinConnectTimeout(c, `the check of topic ${name}`, client.topic(name).exists());
        if (!exists) throw new ConfigError(`topics.${destination}`, `topic ${name} does not exist at ${c.display}; create it (gcloud pubsub topics create ${name}) or fix topics`);
      }
      if (this.#o.topics.size === 0) await withinConnectTimeout(c, 'listing topics', client.getTopics({ pageSize: 1, autoPaginate: false }));
    } catch (err) {
      if (owned) await client.close().catch(() => {});
      throw err;
    }
    this.#client = client;
    this.#owned = owned;
    this.#o.logger.info({ transport: 'pubsub', at: c.display, topics: [...this.#o.topics.values()] }, 'pubsub transport: started');
  }

  async #publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (!this.#client) {
      try {
        await this.#connectOnce();
      } catch (err) {
        // Nothing answers (started during an outage): destination-down, so the events wait instead of using up attempts.
        const kind = brokerOutage(err) === null ? 'retriable' : 'destination-down';
        const error = new TransportError(kind, `the Pub/Sub transport could not start: ${thrownText(err)}`, { cause: err });
        return events.map(() => ({ ok: false, error }));
      }
    }
    const o = this.#o;
    const outcomes: (PublishOutcome | undefined)[] = new Array(events.length);
    const sent: Promise<void>[] = [];
    const used = new Set<Topic>();
    const failedKeys = new Map<Topic, Set<string>>();
    for (const [i, event] of events.entries()) {
      const built = buildPubSubMessage(event);
      if (!built.ok) {
        outcomes[i] = { ok: false, error: new TransportError('permanent', `event ${event.id} cannot be published to Pub/Sub: ${built.reason}`) };
        continue;
      }
      const name = this.#topicName(event.destination);
      const topic = this.#topic(name);
      used.add(topic);
      const { data, attributes, orderingKey, bytes } = built.message;
      // The room may be held by this call's own messages, still in the client's batch: send them before waiting.
      if (this.#limit.full(bytes)) for (const t of used) t.flush().catch(() => {});
      if (!(await this.#limit.acquire(bytes, signal))) break;
      const message = o.messageOrdering ? { data, attributes, orderingKey } : { data, attributes };
      sent.push(
        topic.publishMessage(message).then(
          () => void (outcomes[i] = ACK),
          (err: unknown) => {
            outcomes[i] = { ok: false, error: publishFailure(err, name, event.destination) };
            if (o.messageOrdering) failedKeys.set(topic, (failedKeys.get(topic) ?? new Set()).add(orderingKey));
          },
        ).finally(() => this.#limit.release(bytes)),
      );
    }
    // The call is the batch: send now, not after maxMilliseconds.
    for (const topic of used) topic.flush().catch(() => {});
    const settled = await settleWithin(Promise.all(sent), o.publishTimeoutMs, signal);
    // A failed key is stopped by the client until resumed: resume it, so the relay's retry can go out (in order).
    for (const [topic, keys] of failedKeys) for (const key of keys) topic.resumePublishing(key);
    // No ack within publishTimeoutMs: Pub/Sub, or the path to it, is not answering (nothing about a message
    // makes it that slow): destination-down. An abort (the relay's stop, a lease deadline) stays retriable.
    const silent = !settled && !signal.aborted;
    const why = signal.aborted ? 'the publish call was aborted before Pub/Sub acked it' : `Pub/Sub did not ack within ${o.publishTimeoutMs} ms (publishTimeoutMs): it is not answering`;
    const kind = silent ? 'destination-down' : 'retriable';
    return events.map((e, i) => outcomes[i] ?? { ok: false, error: new TransportError(kind, `publishing event ${e.id} (destination ${e.destination}): ${settled ? 'not sent: the call was aborted' : why}`) });
  }

  #topicName(destination: string): string {
    return this.#o.topics.get(destination) ?? this.#o.topicPrefix + destination;
  }

  #topic(name: string): Topic {
    let topic = this.#topics.get(name);
    if (topic === undefined) {
      const o = this.#o;
      topic = this.#client!.topic(name, {
        messageOrdering: o.messageOrdering,
        batching: { ...o.batching },
        // The client's own retries end with the call's wait; the relay retries after that.
        gaxOpts: { timeout: o.publishTimeoutMs, retry: { retryCodes: [4, 8, 10, 13, 14, 2], backoffSettings: { initialRetryDelayMillis: 100, retryDelayMultiplier: 1.3, maxRetryDelayMillis: 5000, initialRpcTimeoutMillis: o.publishTimeoutMs, rpcTimeoutMultiplier: 1, maxRpcTimeoutMillis: o.publishTimeoutMs, totalTimeoutMillis: o.publishTimeoutMs } } },
      });
      this.#topics.set(name, topic);
    }
    return topic;
  }

  async #close(): Promise<void> {
    await this.#starting?.catch(() => {});
    await Promise.allSettled([...this.#inFlight]);
    const client = this.#client;
    this.#client = null;
    this.#topics.clear();
    if (client && this.#owned) await client.close().catch(() => {});
  }
}

/** True when `promise` settled within `ms` and before `signal` aborted. */
async function settleWithin(promise: Promise<unknown>, ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    onAbort = () => resolve(false);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([promise.then(() => true), stop]);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort!);
  }
}
