import type { OutboxEvent } from '../core/envelope.ts';
import { inboundEventProblem } from '../core/inbound-event.ts';
import { classifyStoreError, storeErrorText } from '../core/store-errors.ts';
import type { OutboxStore, PreparedEvent, RelayStore, SqlExecutor } from '../core/ports.ts';
import { createRelay, type Relay } from '../relay/relay.ts';
import type { RelayOptions } from '../relay/relay-options.ts';
import type { Inbox } from './inbox.ts';
import { InboxTransport } from './inbox-transport.ts';

/** An event the inbox queue can never hold: `index` in the received list, and why. */
export interface QueueRefusal {
  readonly index: number;
  readonly reason: string;
}

/**
 * The fast path of the inbox worker mode: a consumer only writes what it
 * received into a local queue table (an outbox-shaped table whose store
 * ignores duplicate ids) and acks the broker. Handlers run later, in
 * `createInboxWorker` processes, so slow handlers never slow consumption.
 *
 * @example
 * const queue = new InboxQueue(new PostgresOutboxStore({ table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => connection.transaction(fn));
 * await queue.receive(events); // then ack
 */
export class InboxQueue {
  constructor(
    private readonly store: OutboxStore,
    private readonly transaction: <T>(fn: (tx: SqlExecutor) => Promise<T>) => Promise<T>,
  ) {}

  /**
   * Stores received events (a redelivered id is ignored). Ack the broker once
   * this resolved. Resolves with the events the queue can never hold, by
   * index, with the reason naming the field or the SQLSTATE: the consumer
   * dead-letters those (and acks the rest). An event the inbox could not store
   * (`inboundEventProblem`) is refused before any SQL; when PostgreSQL refuses
   * a chunk deterministically (`classifyStoreError`), its events are stored
   * one per transaction to find the refused ones. An outage rejects: retry
   * the whole call (stored ids are ignored the second time).
   */
  async receive(events: readonly OutboxEvent[]): Promise<QueueRefusal[]> {
    const refused: QueueRefusal[] = [];
    const storable: number[] = [];
    events.forEach((e, index) => {
      const problem = inboundEventProblem(e);
      if (problem === null) storable.push(index);
      else refused.push({ index, reason: problem });
    });
    if (storable.length === 0) return refused;
    try {
      await this.#insert(storable.map((i) => events[i]!));
    } catch (err) {
      if (classifyStoreError(err) !== 'deterministic') throw err;
      if (storable.length === 1) refused.push({ index: storable[0]!, reason: `the inbox queue refused it: ${storeErrorText(err)}` });
      else {
        for (const index of storable) {
          try {
            await this.#insert([events[index]!]);
          } catch (one) {
            if (classifyStoreError(one) !== 'deterministic') throw one;
            refused.push({ index, reason: `the inbox queue refused it: ${storeErrorText(one)}` });
          }
        }
      }
    }
    return refused.sort((a, b) => a.index - b.index);
  }

  async #insert(events: readonly OutboxEvent[]): Promise<void> {
    const prepared: PreparedEvent[] = events.map((e) => ({
      id: e.id,
      type: e.type,
      aggregateType: e.aggregateType,
      aggregateId: e.aggregateId,
      key: e.key,
      destination: e.destination,
      payloadJson: e.payloadJson ?? JSON.stringify(e.payload ?? null),
      headers: e.headers,
      occurredAt: e.occurredAt,
      version: e.version,
    }));
    await this.transaction((tx) => this.store.insert(tx, prepared));
  }
}

export interface InboxWorkerOptions extends Omit<RelayOptions, 'transport' | 'routes' | 'store'> {
  readonly inbox: Inbox;
  /** The relay store over the inbox queue table. */
  readonly store: RelayStore;
}

/**
 * Runs handlers from the inbox queue: a relay whose transport is the inbox.
 * Buckets of the key spread the work over as many worker processes and lanes
 * as you start, independent of broker partitions; one key's events run in
 * arrival order. Handler failures back off by the inbox's retry policy and end
 * dead in the inbox, so the relay itself retries without a limit.
 */
export function createInboxWorker(options: InboxWorkerOptions): Relay {
  const { inbox, store, ...relay } = options;
  return createRelay({
    ...relay,
    store,
    transport: new InboxTransport(inbox),
    retry: { baseDelayMs: 100, maxDelayMs: 300_000, maxAttempts: 1_000_000, ...relay.retry },
  });
}
