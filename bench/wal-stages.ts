/**
 * Where the time goes between COMMIT and the sink in bench/wal.ts's latency
 * runs (relay in process, no-op transport, one clock). Per event:
 *
 *   server commit (the WAL Commit message's timestamp; WAL mode only)
 *   producer sees COMMIT (its query resolved)
 *   WAL arrival (the Commit message reached the relay's stream; WAL mode only)
 *   claim sent / claim returned (the claim that returned the event)
 *   publish called (the no-op transport got it)
 *   mark returned (the complete statement of its batch resolved; not part of the latency)
 *
 * It wraps the relay store (timing claim and complete) and takes the store's
 * `walTrace` hook; nothing here changes what the relay does.
 */
import type { BucketLease, ClaimOptions, Completion, OutboxEvent, RelayHeartbeat, RelayStore } from 'txbox';
import type { WalCommit } from 'txbox/postgres';
import { percentile } from './lib.ts';

const fmt = (ms: number): string => (Number.isFinite(ms) ? ms.toFixed(2) : '-');

export class StageTrace {
  /** seq -> [server commit, WAL arrival]. */
  readonly #wal = new Map<number, [number, number]>();
  /** id -> [seq, claim sent, claim returned]. */
  readonly #claimed = new Map<string, [number, number, number]>();
  readonly #published = new Map<string, number>();
  /** seq -> mark returned. */
  readonly #marked = new Map<number, number>();
  #claims = 0;
  #emptyClaims = 0;
  #waits = 0;
  /** id -> producer saw COMMIT; set by measureCommitToAck. */
  committedAt: ReadonlyMap<string, number> = new Map();
  /** lines() reports the events committed from this time on (the run's warm-up left out). */
  steadyFrom = Number.NEGATIVE_INFINITY;

  /** `whileMarking` false: the wrapped store hides claimWhileMarking, so the relay waits for every mark before it claims (an A/B of that path). */
  constructor(
    private readonly now: () => number,
    private readonly whileMarking = true,
  ) {}

  readonly onWalCommit = (c: WalCommit): void => {
    const t = this.now();
    for (const seq of c.seqs) this.#wal.set(seq, [c.commitTimeMs, t]);
  };

  onPublish(events: readonly OutboxEvent[]): void {
    const t = this.now();
    for (const e of events) if (!this.#published.has(e.id)) this.#published.set(e.id, t);
  }

  wrap(inner: RelayStore): RelayStore {
    const self = this;
    const prune = inner.prune?.bind(inner);
    return {
      heartbeat: (relay: RelayHeartbeat, ttlMs: number) => inner.heartbeat(relay, ttlMs),
      lease: (relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number) => inner.lease(relayId, held, acquire, ttlMs),
      release: (relayId: string, leases: readonly BucketLease[]) => inner.release(relayId, leases),
      leave: (relayId: string, held: readonly BucketLease[]) => inner.leave(relayId, held),
      async claim(leases: readonly BucketLease[], options: ClaimOptions) {
        const sent = self.now();
        return self.#claimedBy(sent, await inner.claim(leases, options));
      },
      // Forwarded when the store has it: without it the relay waits for every mark before its next claim.
      ...(inner.claimWhileMarking && self.whileMarking
        ? {
            async claimWhileMarking(leases: readonly BucketLease[], options: ClaimOptions) {
              const sent = self.now();
              const events = await inner.claimWhileMarking!(leases, options);
              return events === null ? null : self.#claimedBy(sent, events);
            },
          }
        : {}),
      async complete(relayId: string, completions: readonly Completion[]) {
        const r = await inner.complete(relayId, completions);
        const t = self.now();
        for (const c of completions) if (!self.#marked.has(c.seq)) self.#marked.set(c.seq, t);
        return r;
      },
      waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number, buckets?: readonly number[]) {
        self.#waits++;
        return inner.waitForEvents(timeoutMs, signal, since, buckets);
      },
      wakeups: (buckets?: readonly number[]) => inner.wakeups?.(buckets) ?? 0,
      close: () => inner.close(),
      ...(prune ? { prune } : {}),
    };
  }

  #claimedBy<T extends OutboxEvent & { seq: number }>(sent: number, events: T[]): T[] {
    const returned = this.now();
    this.#claims++;
    if (events.length === 0) this.#emptyClaims++;
    for (const e of events) if (!this.#claimed.has(e.id)) this.#claimed.set(e.id, [e.seq, sent, returned]);
    return events;
  }

  /** Claims so far, and how many came back empty. */
  claimCounts(): { claims: number; empty: number } {
    return { claims: this.#claims, empty: this.#emptyClaims };
  }

  /** One line per stage: p50, p99, and its mean over the slowest 1% of events (by commit to publish). */
  lines(): string[] {
    const stages = [
      'server commit -> producer sees COMMIT',
      'server commit -> WAL arrival',
      'WAL arrival -> claim sent',
      'producer COMMIT -> claim sent',
      'claim query (sent -> returned)',
      'claim returned -> publish called',
      'producer COMMIT -> publish called',
      'publish called -> mark returned',
    ];
    const rows: number[][] = [];
    let claimedBeforeWal = 0;
    for (const [id, [seq, sent, returned]] of this.#claimed) {
      const c = this.committedAt.get(id);
      const p = this.#published.get(id);
      if (c === undefined || p === undefined || c < this.steadyFrom) continue;
      const w = this.#wal.get(seq);
      const m = this.#marked.get(seq) ?? Number.NaN;
      if (w && sent < w[1]) claimedBeforeWal++;
      rows.push([
        w ? c - w[0] : Number.NaN,
        w ? w[1] - w[0] : Number.NaN,
        w ? sent - w[1] : Number.NaN,
        sent - c,
        returned - sent,
        p - returned,
        p - c,
        m - p,
      ]);
    }
    rows.sort((x, y) => x[6]! - y[6]!);
    const slow = rows.slice(Math.floor(rows.length * 0.99));
    const out = stages.map((name, i) => {
      const xs = rows.map((r) => r[i]!).filter(Number.isFinite).sort((a, b) => a - b);
      const sm = slow.map((r) => r[i]!).filter(Number.isFinite);
      const slowMean = sm.reduce((a, b) => a + b, 0) / Math.max(1, sm.length);
      return `    ${name.padEnd(40)} p50 ${fmt(percentile(xs, 50)).padStart(7)} ms  p99 ${fmt(percentile(xs, 99)).padStart(7)} ms  mean over the slowest 1%: ${fmt(slowMean)} ms`;
    });
    const worst = rows[rows.length - 1];
    if (worst) out.push(`    the slowest event: ${stages.map((name, i) => `${name} ${fmt(worst[i]!)}`).join('; ')}`);
    out.push(`    ${rows.length} events; ${this.#claims} claims (${this.#emptyClaims} empty, ${(this.#claims / Math.max(1, rows.length)).toFixed(2)} per event), ${this.#waits} waits; ${claimedBeforeWal} events claimed before their WAL Commit arrived`);
    return out;
  }
}
