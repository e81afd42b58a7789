import type { OutboxEvent } from '../../core/envelope.ts';
import { AbortedError } from '../../core/errors.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { createKafkaClient, type KafkaClient } from './kafka-client.ts';
import { within } from '../../core/abort.ts';
import { startDespiteOutage } from '../../core/broker-outage.ts';
import { fail, kafkaOutage, startError } from './kafka-outcomes.ts';
import { KafkaPublishCall, type PublishContext } from './kafka-publish-call.ts';
import { ProducerPool } from './kafka-producer-pool.ts';
import { TopicCatalog } from './kafka-topics.ts';
import { resolveKafkaTransportOptions, type KafkaTransportOptions, type ResolvedKafkaTransportOptions } from './kafka-transport-options.ts';

export {
  resolveKafkaTransportOptions,
  topicOf,
  type KafkaTransportOptions,
  type ResolvedKafkaConnection,
  type ResolvedKafkaTransportOptions,
} from './kafka-transport-options.ts';

/**
 * Publishes events to Kafka with kafkajs's idempotent producer (acks=all).
 * The message key is the event's key, so one key stays in one partition and
 * keeps its order; the value is the payload as JSON; `txbox-id`, the type,
 * the aggregate and the version travel as headers next to the event's own
 * (trace context). A publish call goes out as one send (one produce request
 * per broker), and the outcome of each event is its own: one refused event
 * (too large, topic missing, not authorized) fails permanently without
 * failing the others. Broker outages, leader moves and timeouts are
 * retriable. See docs/transports/kafka.md.
 *
 * @example
 * const transport = new KafkaTransport({
 *   brokers: ['kafka-1.internal:9092'],
 *   topics: { orders: 'shop.orders.v1' },
 * });
 * const relay = createRelay({ store, transport });
 */
/** How long close() lets producers and the admin client disconnect before it destroys their sockets. */
const CLOSE_GRACE_MS = 1_000;

export class KafkaTransport implements Transport {
  readonly name = 'kafka';
  readonly #options: ResolvedKafkaTransportOptions;
  readonly #ctx: PublishContext;
  readonly #client: KafkaClient;
  readonly #inFlight = new Set<Promise<unknown>>();
  #closing: Promise<void> | null = null;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start() or the first publish. */
  constructor(options: KafkaTransportOptions = {}) {
    this.#options = resolveKafkaTransportOptions(options);
    const client = createKafkaClient(this.#options);
    this.#client = client;
    this.#ctx = {
      options: this.#options,
      pool: new ProducerPool(client, this.#options.producers, this.#options.logger),
      topics: this.#options.allowAutoTopicCreation ? null : new TopicCatalog(client, this.#options.logger),
    };
  }

  /**
   * Connects the admin client (unless allowAutoTopicCreation) and one idempotent
   * producer, which checks the address, TLS, the SASL credentials and the
   * permission to produce idempotently. Throws ConfigError naming `brokers`,
   * `sasl` or `compression`. When no broker answers (refused, unknown host,
   * connect timeout) it logs a warning and resolves: the events wait as
   * destination-down and the first publish connects. Reopens the transport
   * after `close()`.
   */
  async start(signal: AbortSignal = new AbortController().signal): Promise<void> {
    if (this.#closing) {
      await this.#closing;
      this.#closing = null;
    }
    const o = this.#options;
    const connected = await startDespiteOutage({ transport: 'kafka', address: o.display, logger: o.logger, outage: kafkaOutage }, async () => {
      try {
        await this.#ctx.topics?.connect(signal);
        await this.#ctx.pool.warmUp(signal);
      } catch (err) {
        if (signal.aborted) throw new AbortedError('KafkaTransport.start() was aborted before the cluster answered');
        throw startError(err, o);
      }
    }, signal);
    // Unreachable: the producers and the admin client connect on the first publish (the relay's probe).
    if (!connected) return;
    const mapped = [...this.#options.topics.values()];
    if (this.#ctx.topics && mapped.length > 0) {
      const missing = await this.#ctx.topics.missing(mapped, signal).catch(() => new Set<string>());
      if (missing.size > 0) {
        this.#options.logger.warn(
          { component: 'kafka', topics: [...missing] },
          'topics mapped in the Kafka transport options do not exist; their events fail as unroutable until they are created',
        );
      }
    }
  }

  /**
   * Produces every event and resolves with one outcome per event in input
   * order, after the broker acked (acks=all). Never rejects for a failed event.
   * When `signal` aborts first, the events not yet acked are retriable; the
   * broker may still write them (at-least-once).
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing) {
      const outcome = fail('retriable', 'the Kafka transport is closed; call start() to reopen it');
      return Promise.resolve(events.map(() => outcome));
    }
    const done = new KafkaPublishCall(this.#ctx, events, signal).run();
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for in-flight publishes (each bounded by its signal), then disconnects the producers and the admin client. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    await Promise.allSettled([...this.#inFlight]);
    const closed = Promise.allSettled([this.#ctx.pool.close(), this.#ctx.topics?.close()]);
    // A producer still connecting to a broker that accepted and never answered would hold close() for the
    // request timeout: after a second its sockets are destroyed, which fails that connect at once.
    await within(closed, CLOSE_GRACE_MS);
    const left = this.#client.destroySockets();
    await closed;
    if (left > 0) this.#options.logger.debug({ sockets: left }, 'txbox kafka transport: closed sockets kafkajs left open');
  }
}
