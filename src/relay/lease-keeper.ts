import { performance } from 'node:perf_hooks';
import type { BucketLease, RelayStore } from '../core/ports.ts';

interface Held {
  readonly token: string;
  /** Local monotonic deadline, a safety margin before the database's lease_until. */
  readonly deadline: number;
}

/** How long before its lease's end (by the time the renewal was sent) a relay stops acting on a bucket. */
export function leaseMarginMs(ttlMs: number): number {
  return Math.min(2000, Math.floor(ttlMs / 5));
}

/** How often leases are renewed. */
export function leaseRenewEveryMs(ttlMs: number): number {
  return Math.floor(ttlMs / 3);
}

/**
 * The longest publish call that fits inside a lease (ttl - margin). A call
 * runs past that only while renewals keep coming; when they stop, it is
 * aborted at the lease's local deadline (call-signal.ts).
 */
export function maxPublishTimeoutMs(ttlMs: number): number {
  return ttlMs - leaseMarginMs(ttlMs);
}

export interface LeaseChange {
  readonly held: number;
  readonly acquired: number;
  readonly lost: number;
  readonly released: number;
  readonly liveRelays: number;
}

/**
 * Keeps this relay's fair share of bucket leases: ceil(buckets / live relays).
 * The lease is judged by the database clock; locally the relay trusts a lease
 * only until (time the renewal was sent + ttl - margin) on its monotonic
 * clock, so a paused or partitioned relay stops publishing before another
 * relay can take the bucket.
 */
export class LeaseKeeper {
  readonly #held = new Map<number, Held>();
  /** Buckets with a batch in flight: never released mid-batch. */
  readonly #busy = new Map<number, number>();

  constructor(
    private readonly store: RelayStore,
    private readonly relayId: string,
    private readonly ttlMs: number,
  ) {}

  get marginMs(): number {
    return leaseMarginMs(this.ttlMs);
  }

  /** One heartbeat + rebalance round trip pair. */
  async tick(stats: { inFlight: number; publishedTotal: number; ratePerMinute: number; host: string; pid: number }): Promise<LeaseChange> {
    const { liveRelays, bucketCount } = await this.store.heartbeat({ relayId: this.relayId, ...stats }, this.ttlMs);
    const target = Math.ceil(bucketCount / Math.max(1, liveRelays));
    const now = performance.now();
    const valid = [...this.#held].filter(([, h]) => h.deadline > now);
    let released: BucketLease[] = [];
    const surplus = valid.length - target;
    if (surplus > 0) {
      released = valid
        .filter(([b]) => !this.#busy.has(b))
        .slice(0, surplus)
        .map(([bucket, h]) => ({ bucket, token: h.token }));
      for (const l of released) this.#held.delete(l.bucket);
      await this.store.release(this.relayId, released);
    }
    const keep = [...this.#held].map(([bucket, h]) => ({ bucket, token: h.token }));
    const sentAt = performance.now();
    const result = await this.store.lease(this.relayId, keep, Math.max(0, target - keep.length), this.ttlMs);
    const deadline = sentAt + this.ttlMs - this.marginMs;
    const before = new Set(this.#held.keys());
    this.#held.clear();
    for (const l of result) this.#held.set(l.bucket, { token: l.token, deadline });
    let acquired = 0;
    for (const b of this.#held.keys()) if (!before.has(b)) acquired++;
    let lost = 0;
    for (const b of before) if (!this.#held.has(b)) lost++;
    return { held: this.#held.size, acquired, lost, released: released.length, liveRelays };
  }

  /** Valid leases of one lane's share of buckets (bucket % lanes === lane). */
  leasesFor(lane: number, lanes: number): BucketLease[] {
    const now = performance.now();
    const out: BucketLease[] = [];
    for (const [bucket, h] of this.#held) if (bucket % lanes === lane && h.deadline > now) out.push({ bucket, token: h.token });
    return out;
  }

  /** True while this relay may still act on `bucket` under `token`. */
  isValid(bucket: number, token: string): boolean {
    const h = this.#held.get(bucket);
    return h !== undefined && h.token === token && h.deadline > performance.now();
  }

  /** The local deadline (performance.now() clock) of `bucket`'s lease under `token`; -Infinity when not held. */
  deadlineOf(bucket: number, token: string): number {
    const h = this.#held.get(bucket);
    return h !== undefined && h.token === token ? h.deadline : -Infinity;
  }

  markBusy(buckets: Iterable<number>): void {
    for (const b of buckets) this.#busy.set(b, (this.#busy.get(b) ?? 0) + 1);
  }

  markIdle(buckets: Iterable<number>): void {
    for (const b of buckets) {
      const n = (this.#busy.get(b) ?? 1) - 1;
      if (n <= 0) this.#busy.delete(b);
      else this.#busy.set(b, n);
    }
  }

  /** Gives every lease back and leaves the live relays (graceful stop). */
  async leave(): Promise<number> {
    const n = this.#held.size;
    this.#held.clear();
    await this.store.leave(this.relayId);
    return n;
  }

  get size(): number {
    return this.#held.size;
  }
}
