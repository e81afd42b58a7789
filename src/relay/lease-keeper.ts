import { performance } from 'node:perf_hooks';
import type { BucketLease, RelayHeartbeat, RelayStore } from '../core/ports.ts';

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

/**
 * One lane's valid leases, as the lane's claims use them: the leases, their
 * buckets, and each bucket's token. The same object (and arrays) until the
 * leases change or one of them runs out, so a lane's claim loop allocates
 * nothing for them per claim (with 256 buckets in 2 lanes, 128 each).
 * Read-only: callers must not change it.
 */
export interface LaneLeases {
  readonly leases: readonly BucketLease[];
  readonly buckets: readonly number[];
  readonly tokens: ReadonlyMap<number, string>;
}

interface CachedView {
  readonly view: LaneLeases;
  readonly lanes: number;
  readonly version: number;
  /** The earliest local deadline among its leases: the view is stale from then on. */
  readonly validUntil: number;
}

export interface LeaseChange {
  readonly held: number;
  readonly acquired: number;
  readonly lost: number;
  readonly released: number;
  readonly liveRelays: number;
}

/** Quick ticks after the number of live relays changed while short of the fair share (2 intervals' worth at a quarter interval). */
const FAST_TICKS = 8;
const MIN_TICK_MS = 20;
/** After another relay's lease runs out by the local clock: allowance for the database clock and the round trip. */
const EXPIRY_SLACK_MS = 25;

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
  /** Fair-share state of the last tick, for `nextTickDelayMs`. */
  #target = 0;
  #liveRelays = 0;
  #fastTicksLeft = 0;
  #foreignExpiryAt: number | undefined;
  /** A tick renews what it read from #held before its round trip: markIdle releases nothing meanwhile. */
  #ticking = false;
  /** Bumped at every change of #held: the lanes' cached views are stale. */
  #version = 0;
  readonly #views = new Map<number, CachedView>();

  constructor(
    private readonly store: RelayStore,
    private readonly relayId: string,
    private readonly ttlMs: number,
  ) {}

  get marginMs(): number {
    return leaseMarginMs(this.ttlMs);
  }

  /** One heartbeat + rebalance round trip pair. */
  async tick(stats: Omit<RelayHeartbeat, 'relayId'>): Promise<LeaseChange> {
    this.#ticking = true;
    try {
      return await this.#tick(stats);
    } finally {
      this.#ticking = false;
    }
  }

  async #tick(stats: Omit<RelayHeartbeat, 'relayId'>): Promise<LeaseChange> {
    const beat = await this.store.heartbeat({ relayId: this.relayId, ...stats }, this.ttlMs);
    const { liveRelays, bucketCount } = beat;
    const target = Math.ceil(bucketCount / Math.max(1, liveRelays));
    const now = performance.now();
    const expiryMs = beat.nextForeignExpiryMs;
    this.#foreignExpiryAt = expiryMs === undefined || expiryMs === null ? undefined : now + expiryMs;
    if (liveRelays !== this.#liveRelays) this.#fastTicksLeft = FAST_TICKS;
    this.#liveRelays = liveRelays;
    this.#target = target;
    const valid = [...this.#held].filter(([, h]) => h.deadline > now);
    let released: BucketLease[] = [];
    const surplus = valid.length - target;
    if (surplus > 0) {
      released = valid
        .filter(([b]) => !this.#busy.has(b))
        .slice(0, surplus)
        .map(([bucket, h]) => ({ bucket, token: h.token }));
      for (const l of released) this.#held.delete(l.bucket);
      this.#version++;
      await this.store.release(this.relayId, released);
    }
    const keep = [...this.#held].map(([bucket, h]) => ({ bucket, token: h.token }));
    const sentAt = performance.now();
    const result = await this.store.lease(this.relayId, keep, Math.max(0, target - keep.length), this.ttlMs);
    const deadline = sentAt + this.ttlMs - this.marginMs;
    const before = new Set(this.#held.keys());
    this.#held.clear();
    for (const l of result) this.#held.set(l.bucket, { token: l.token, deadline });
    this.#version++;
    let acquired = 0;
    for (const b of this.#held.keys()) if (!before.has(b)) acquired++;
    let lost = 0;
    for (const b of before) if (!this.#held.has(b)) lost++;
    if (this.#held.size >= target) this.#fastTicksLeft = 0;
    return { held: this.#held.size, acquired, lost, released: released.length, liveRelays };
  }

  /**
   * How long to wait before the next tick, given the regular interval
   * (`ttl / 3`). Shorter in two cases, so that leases change hands within two
   * regular intervals rather than waiting for this relay's next one:
   * - short of its fair share after the number of live relays changed (it
   *   joined, or another left): the relays over their share release at their
   *   next tick, and this relay takes the buckets a quarter interval later,
   *   not a whole one. At most FAST_TICKS such ticks per change, as with
   *   several relays the shares (ceil(256 / relays)) need not all be met.
   * - another relay's lease runs out before the next regular tick (it
   *   crashed, or stopped renewing): tick just after it runs out, so a
   *   crashed relay's buckets are taken within the lease TTL of its last
   *   renewal, not up to an interval later.
   */
  nextTickDelayMs(intervalMs: number): number {
    let delay = intervalMs;
    if (this.#fastTicksLeft > 0 && this.#held.size < this.#target) {
      this.#fastTicksLeft--;
      delay = Math.min(delay, Math.max(MIN_TICK_MS, Math.floor(intervalMs / 4)));
    }
    if (this.#foreignExpiryAt !== undefined) {
      const untilExpiry = this.#foreignExpiryAt - performance.now() + EXPIRY_SLACK_MS;
      if (untilExpiry < delay) delay = Math.max(MIN_TICK_MS, Math.ceil(untilExpiry));
    }
    return delay;
  }

  /** Valid leases of one lane's share of buckets (bucket % lanes === lane), cached until they change (LaneLeases). */
  laneLeases(lane: number, lanes: number): LaneLeases {
    const now = performance.now();
    const cached = this.#views.get(lane);
    if (cached !== undefined && cached.version === this.#version && cached.lanes === lanes && now < cached.validUntil) return cached.view;
    const leases: BucketLease[] = [];
    const buckets: number[] = [];
    const tokens = new Map<number, string>();
    let validUntil = Number.POSITIVE_INFINITY;
    for (const [bucket, h] of this.#held) {
      if (bucket % lanes !== lane || h.deadline <= now) continue;
      leases.push({ bucket, token: h.token });
      buckets.push(bucket);
      tokens.set(bucket, h.token);
      if (h.deadline < validUntil) validUntil = h.deadline;
    }
    // Not frozen: V8 iterates frozen arrays with for-of through an iterator object per element, which
    // costs more than the arrays it saves. A store that caches by identity checks the contents.
    const view: LaneLeases = { leases, buckets, tokens };
    this.#views.set(lane, { view, lanes, version: this.#version, validUntil });
    return view;
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

  /**
   * Marks buckets idle again. A bucket over this relay's fair share (kept at
   * the last tick only because a batch was in flight) is released at once,
   * not at the next tick, so that a relay that joined gets it sooner; not
   * while a tick runs, which may be renewing it (the next tick releases it).
   */
  markIdle(buckets: Iterable<number>): void {
    const surplus: BucketLease[] = [];
    for (const b of buckets) {
      const n = (this.#busy.get(b) ?? 1) - 1;
      if (n > 0) {
        this.#busy.set(b, n);
        continue;
      }
      this.#busy.delete(b);
      const h = this.#held.get(b);
      if (h !== undefined && !this.#ticking && this.#held.size > this.#target) {
        this.#held.delete(b);
        this.#version++;
        surplus.push({ bucket: b, token: h.token });
      }
    }
    // Fenced by token; if it fails the lease runs out by itself, as after a crash.
    if (surplus.length > 0) this.store.release(this.relayId, surplus).catch(() => {});
  }

  /** Gives every lease back and leaves the live relays (graceful stop). */
  async leave(): Promise<number> {
    const held = [...this.#held].map(([bucket, h]) => ({ bucket, token: h.token }));
    this.#held.clear();
    this.#version++;
    await this.store.leave(this.relayId, held);
    return held.length;
  }

  get size(): number {
    return this.#held.size;
  }
}
