import type { NewEvent } from './events.ts';
import type { Outbox } from './outbox.ts';
import type { SqlExecutor } from './ports.ts';

/**
 * Collects domain events on an aggregate until they are written. Give each
 * aggregate one and `record` events as state changes.
 *
 * @example
 * class Order {
 *   readonly events = new DomainEvents();
 *   place() { this.status = 'placed'; this.events.record(OrderPlaced({ aggregateId: this.id, payload: { id: this.id } })); }
 * }
 */
export class DomainEvents {
  #pending: NewEvent<any, string>[] = [];

  record(event: NewEvent<any, string>): void {
    this.#pending.push(event);
  }

  /** Returns and forgets the recorded events. */
  pull(): NewEvent<any, string>[] {
    const out = this.#pending;
    this.#pending = [];
    return out;
  }

  /** The recorded events, still recorded. */
  peek(): NewEvent<any, string>[] {
    return this.#pending.slice();
  }

  /** Forgets the first `n` recorded events (those a flush wrote). */
  drop(n: number): void {
    this.#pending.splice(0, n);
  }

  get size(): number {
    return this.#pending.length;
  }
}

/** Anything that carries domain events. */
export interface HasDomainEvents {
  readonly events: DomainEvents;
}

/**
 * Tracks the aggregates a business transaction touched and writes their
 * recorded events with one `enqueue` just before the caller commits.
 * It never begins or commits: call `flush(tx)` inside your transaction.
 * If `flush` is not reached (the transaction rolls back), nothing was written.
 *
 * @example
 * const uow = new UnitOfWork(outbox);
 * await client.query('BEGIN');
 * const order = Order.place(input); uow.track(order);
 * await orders.save(client, order);
 * await uow.flush(client);
 * await client.query('COMMIT');
 */
export class UnitOfWork {
  readonly #tracked = new Set<HasDomainEvents>();
  readonly #loose: NewEvent<any, string>[] = [];

  constructor(private readonly outbox: Outbox) {}

  track<T extends HasDomainEvents>(aggregate: T): T {
    this.#tracked.add(aggregate);
    return aggregate;
  }

  /** Adds an event that belongs to no tracked aggregate. */
  add(event: NewEvent<any, string>): void {
    this.#loose.push(event);
  }

  /**
   * Writes every recorded event in recording order per aggregate (aggregates
   * in tracking order) inside `tx`. Events are taken off the aggregates only
   * after the insert succeeded, so a failed flush can be retried; events
   * recorded, added or tracked while the insert was in flight stay for the
   * next flush.
   */
  async flush(tx: SqlExecutor): Promise<string[]> {
    const batch: NewEvent<any, string>[] = [];
    const taken = new Map<HasDomainEvents, number>();
    for (const agg of this.#tracked) {
      const events = agg.events.peek();
      taken.set(agg, events.length);
      batch.push(...events);
    }
    const loose = this.#loose.length;
    batch.push(...this.#loose);
    const ids = await this.outbox.enqueue(tx, batch);
    for (const [agg, n] of taken) {
      agg.events.drop(n);
      if (agg.events.size === 0) this.#tracked.delete(agg);
    }
    this.#loose.splice(0, loose);
    return ids;
  }
}
