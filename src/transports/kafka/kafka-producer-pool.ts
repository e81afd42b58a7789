/**
 * The transport's idempotent producers. Each slot carries one publish call at
 * a time, so that concurrent calls never share a producer's sequence numbers.
 *
 * Why a failed send retires its producer: kafkajs gives back the sequence
 * numbers of every partition of a failed produce request, including those the
 * broker did write (a request to several partitions fails as a whole when one
 * partition's answer is an error, and a timed-out request may have been
 * written). Its next batch for such a partition would then reuse sequence
 * numbers the broker has already seen, and the broker acks it as a duplicate
 * without writing it: silent loss. A fresh producer has a fresh producer id
 * and starts its sequences at 0, so nothing it sends can be mistaken for an
 * earlier batch. (test/integration/kafka-transport.test.ts shows the loss
 * with a reused producer.)
 */
import type { Logger } from '../../core/logger.ts';
import type { KafkaClient, ProducerHandle } from './kafka-client.ts';
import { untilAborted } from '../../core/abort.ts';

interface Slot {
  /** The slot's producer, connected or connecting; null until first needed or after discard. */
  current: Promise<ProducerHandle> | null;
  busy: boolean;
}

/** A slot held by one publish call. */
export interface ProducerLease {
  /** The slot's producer, connecting a new one if needed. Rejects with the client's error, or the signal's reason. */
  producer(signal: AbortSignal): Promise<ProducerHandle>;
  /** Retires the slot's producer: it is closed once `pending` (its send still in flight) settles; the next producer() connects a new one. */
  discard(pending?: Promise<unknown>): void;
  release(): void;
}

export class ProducerPool {
  readonly #client: KafkaClient;
  readonly #logger: Logger;
  readonly #slots: Slot[];
  readonly #waiting: (() => void)[] = [];
  readonly #retiring = new Set<Promise<void>>();

  constructor(client: KafkaClient, size: number, logger: Logger) {
    this.#client = client;
    this.#logger = logger;
    this.#slots = Array.from({ length: size }, () => ({ current: null, busy: false }));
  }

  /** Waits for a free slot (first come, first served). Rejects with the signal's reason if it aborts first. */
  async acquire(signal: AbortSignal): Promise<ProducerLease> {
    for (;;) {
      signal.throwIfAborted();
      const slot = this.#slots.find((s) => !s.busy);
      if (slot) {
        slot.busy = true;
        return this.#lease(slot);
      }
      await new Promise<void>((resolve, reject) => {
        const wake = (): void => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = (): void => {
          const i = this.#waiting.indexOf(wake);
          if (i >= 0) this.#waiting.splice(i, 1);
          reject(signal.reason);
        };
        this.#waiting.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
  }

  /** Connects the first slot's producer now (start() uses it to verify the cluster). */
  async warmUp(signal: AbortSignal): Promise<void> {
    const lease = await this.acquire(signal);
    try {
      await lease.producer(signal);
    } finally {
      lease.release();
    }
  }

  /** Closes every producer, waiting for retired ones whose last send is still settling (bounded by the client's timeouts and retries). */
  async close(): Promise<void> {
    const open = this.#slots.map((s) => s.current).filter((p): p is Promise<ProducerHandle> => p !== null);
    for (const s of this.#slots) s.current = null;
    await Promise.allSettled([...open.map((p) => p.then((h) => h.close())), ...this.#retiring]);
  }

  #lease(slot: Slot): ProducerLease {
    let released = false;
    return {
      producer: (signal) => {
        slot.current ??= this.#open(slot);
        return untilAborted(slot.current, signal);
      },
      discard: (pending) => {
        const old = slot.current;
        slot.current = null;
        if (old === null) return;
        const done = Promise.allSettled([pending])
          .then(() => old)
          .then((h) => h.close())
          .catch((err: unknown) => this.#logger.debug({ component: 'kafka', error: String(err) }, 'closing a retired producer failed'))
          .finally(() => this.#retiring.delete(done));
        this.#retiring.add(done);
      },
      release: () => {
        if (released) return;
        released = true;
        slot.busy = false;
        this.#waiting.shift()?.();
      },
    };
  }

  #open(slot: Slot): Promise<ProducerHandle> {
    const opening = this.#client.openProducer();
    // A failed connect leaves the slot empty, so that the next call tries again.
    opening.catch(() => {
      if (slot.current === opening) slot.current = null;
    });
    return opening;
  }
}

