/**
 * One `publish()` call of the Kafka transport: build and check every message,
 * make sure their topics exist, then produce them with one send per chunk of
 * at most maxMessageBytes (usually the whole call: one request per broker,
 * all records in flight together, acks=all). When the broker refuses a send,
 * the events are split (by topic, then in halves) and sent again, so that one
 * bad event fails alone and its batch-mates are not failed with it.
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import type { KafkaRecord } from './kafka-client.ts';
import { buildKafkaRecord } from './kafka-message.ts';
import { ACK, abortedSend, classifyKafkaError, fail, failedSend, topicCheckFailed, unroutable, type KafkaFailure } from './kafka-outcomes.ts';
import { untilAborted } from '../../core/abort.ts';
import type { ProducerLease, ProducerPool } from './kafka-producer-pool.ts';
import type { TopicCatalog } from './kafka-topics.ts';
import { topicOf, type ResolvedKafkaTransportOptions } from './kafka-transport-options.ts';

export interface PublishContext {
  readonly options: ResolvedKafkaTransportOptions;
  readonly pool: ProducerPool;
  /** Null when the broker may create topics (allowAutoTopicCreation). */
  readonly topics: TopicCatalog | null;
}

interface Pending {
  readonly index: number;
  readonly destination: string;
  readonly record: KafkaRecord;
}

export class KafkaPublishCall {
  readonly #ctx: PublishContext;
  readonly #events: readonly OutboxEvent[];
  readonly #signal: AbortSignal;
  readonly #outcomes: (PublishOutcome | undefined)[];
  /** A failure of the whole cluster connection (broker down, credentials): later chunks of the call are not tried. */
  #callFailure: KafkaFailure | null = null;

  constructor(ctx: PublishContext, events: readonly OutboxEvent[], signal: AbortSignal) {
    this.#ctx = ctx;
    this.#events = events;
    this.#signal = signal;
    this.#outcomes = new Array<PublishOutcome | undefined>(events.length);
  }

  async run(): Promise<PublishOutcome[]> {
    let pending = this.#build();
    if (pending.length > 0 && this.#ctx.topics !== null && !this.#signal.aborted) pending = await this.#routable(pending);
    if (pending.length > 0 && !this.#signal.aborted) {
      let lease: ProducerLease | null = null;
      try {
        lease = await this.#ctx.pool.acquire(this.#signal);
      } catch (err) {
        // Only an abort ends the wait for a free producer; the events then get the aborted outcome below.
        if (!this.#signal.aborted) throw err;
      }
      if (lease) {
        try {
          for (const chunk of chunks(pending, this.#ctx.options.maxMessageBytes)) await this.#send(lease, chunk);
        } finally {
          lease.release();
        }
      }
    }
    const aborted = abortedSend(this.#ctx.options);
    return Array.from(this.#outcomes, (o) => o ?? aborted);
  }

  /** Messages for the events that can travel; the others get a permanent outcome now. */
  #build(): Pending[] {
    const o = this.#ctx.options;
    const pending: Pending[] = [];
    this.#events.forEach((event, index) => {
      const topic = topicOf(o, event.destination);
      if (topic === null) {
        this.#outcomes[index] = fail(
          'permanent',
          `destination ${JSON.stringify(event.destination)} gives topic ${JSON.stringify(o.topicPrefix + event.destination)}, which is not a legal Kafka topic name (letters, digits, ".", "_", "-"); map it in topics`,
        );
        return;
      }
      const built = buildKafkaRecord(event, topic);
      if (!built.ok) {
        this.#outcomes[index] = fail('permanent', `cannot build the Kafka message for topic ${JSON.stringify(topic)}: ${built.reason}`);
      } else if (built.record.bytes > o.maxMessageBytes) {
        this.#outcomes[index] = fail(
          'permanent',
          `message too large: ${built.record.bytes} bytes with Kafka framing, over maxMessageBytes (${o.maxMessageBytes}) for topic ${JSON.stringify(topic)}; store large data elsewhere and put a reference in the event, or raise maxMessageBytes together with the topic's max.message.bytes`,
        );
      } else {
        pending.push({ index, destination: event.destination, record: built.record });
      }
    });
    return pending;
  }

  /** Drops (as unroutable) the events whose topic does not exist. */
  async #routable(pending: Pending[]): Promise<Pending[]> {
    let missing: Set<string>;
    try {
      missing = await this.#ctx.topics!.missing(new Set(pending.map((p) => p.record.topic)), this.#signal);
    } catch (err) {
      if (!this.#signal.aborted) {
        const failure = classifyKafkaError(err);
        for (const p of pending) this.#outcomes[p.index] = topicCheckFailed(failure, p.record.topic, this.#ctx.options);
      }
      return [];
    }
    return pending.filter((p) => {
      if (!missing.has(p.record.topic)) return true;
      this.#outcomes[p.index] = unroutable(p.record.topic, p.destination);
      return false;
    });
  }

  async #send(lease: ProducerLease, group: readonly Pending[]): Promise<void> {
    if (this.#signal.aborted) return;
    if (this.#callFailure !== null) {
      for (const p of group) this.#outcomes[p.index] = failedSend(this.#callFailure, p.record.topic, this.#ctx.options);
      return;
    }
    let sending: Promise<void> | null = null;
    try {
      const producer = await lease.producer(this.#signal);
      sending = producer.send(group.map((p) => p.record));
      await untilAborted(sending, this.#signal);
      for (const p of group) this.#outcomes[p.index] = ACK;
      return;
    } catch (err) {
      if (sending !== null) lease.discard(sending); // its sequence numbers can no longer be trusted
      if (this.#signal.aborted) return;
      await this.#failed(lease, group, classifyKafkaError(err));
    }
  }

  async #failed(lease: ProducerLease, group: readonly Pending[], failure: KafkaFailure): Promise<void> {
    const topics = new Set(group.map((p) => p.record.topic));
    const topic = topics.size === 1 ? group[0]!.record.topic : null;
    const settleAll = (f: KafkaFailure): void => {
      for (const p of group) this.#outcomes[p.index] = failedSend(f, topic, this.#ctx.options);
    };
    if (failure.scope === 'call') this.#callFailure = failure;
    if (failure.scope === 'call' || (failure.kind === 'retriable' && !failure.unknownTopic)) return settleAll(failure);
    if (topic === null) {
      // Which topic? Send each topic's events on their own.
      for (const t of topics) await this.#send(lease, group.filter((p) => p.record.topic === t));
      return;
    }
    if (failure.unknownTopic) return this.#unknownTopic(group, topic, failure);
    if (failure.scope === 'topic' || group.length === 1) return settleAll(failure);
    // One record (or a few) is refused: halve until the refused ones stand alone.
    const half = Math.ceil(group.length / 2);
    await this.#send(lease, group.slice(0, half));
    await this.#send(lease, group.slice(half));
  }

  /** The send said the topic is unknown: unroutable if it is really gone, retriable if it exists (metadata lagging). */
  async #unknownTopic(group: readonly Pending[], topic: string, failure: KafkaFailure): Promise<void> {
    const catalog = this.#ctx.topics;
    catalog?.forget(topic);
    let gone = false;
    if (catalog) gone = await catalog.missing([topic], this.#signal).then((m) => m.has(topic), () => false);
    for (const p of group) this.#outcomes[p.index] = gone ? unroutable(topic, p.destination) : failedSend(failure, topic, this.#ctx.options);
  }
}

/** Consecutive runs of events whose messages add up to at most `maxBytes`, so that no partition's batch can exceed the broker's limit. */
function* chunks(pending: readonly Pending[], maxBytes: number): Generator<Pending[]> {
  let chunk: Pending[] = [];
  let bytes = 0;
  for (const p of pending) {
    if (chunk.length > 0 && bytes + p.record.bytes > maxBytes) {
      yield chunk;
      chunk = [];
      bytes = 0;
    }
    chunk.push(p);
    bytes += p.record.bytes;
  }
  if (chunk.length > 0) yield chunk;
}
