import type { StoredEvent } from '../core/envelope.ts';
import type { MetricRecorder, Metrics } from '../core/metrics.ts';
import type { Completion, OpenCircuit, OutboxGauges, PublishOutcome, RelayStore, Transport, WakeSlotLag } from '../core/ports.ts';
import type { ResolvedRoute } from './routes.ts';

export interface RelayMetricsDeps {
  readonly routes: readonly ResolvedRoute[];
  readonly store: RelayStore;
  /** Bucket leases held now. */
  readonly leasesHeld: () => number;
  /** Destinations whose circuit this relay holds open now. */
  readonly openCircuits: () => readonly OpenCircuit[];
  /** How long a database read of the gauges is reused, in ms. */
  readonly gaugeCacheMs: number;
  /** A gauge read failed (the scrape goes on without those gauges). */
  readonly onGaugeError?: (err: Error) => void;
  /** Recording threw (a broken `Metrics` adapter): reported, and publishing goes on. */
  readonly onRecordError?: (err: Error) => void;
}

/** Outcome indexes of `OutcomeRecorders.counts`. */
const PUBLISHED = 0;
const RETRIED = 1;
const PARKED = 2;
const FENCED = 3;

/** One destination's outcome counters, and its counts of the batch being tallied. */
interface OutcomeRecorders {
  /** published, retried, parked, fenced. */
  readonly recorders: readonly [MetricRecorder, MetricRecorder, MetricRecorder, MetricRecorder];
  readonly counts: [number, number, number, number];
}

/** One (transport, destination)'s histograms, and the first acked event of the call being tallied. */
interface CallRecorders {
  readonly duration: MetricRecorder;
  readonly commitToAck: MetricRecorder;
  /** The call this entry was last touched by. */
  call: number;
  /** The oldest acked event of that call with a created_at, in epoch ms; NaN if none. */
  oldestAckedMs: number;
}

/**
 * The relay's metrics (names and labels: src/core/metric-catalogue.ts). The
 * relay calls it at a few points; recorders are made once per destination
 * and transport and kept, so the hot path is a map lookup and a record per
 * event. The database gauges (backlog, oldest pending age, parked, relays
 * alive) are read with one statement only when metrics are collected, and
 * reused for `gaugeCacheMs`.
 */
export class RelayMetrics {
  readonly #metrics: Metrics;
  readonly #deps: RelayMetricsDeps;
  /** The relay's transport label: its routes' transport names (`http`, or `http+kafka` with several). */
  readonly #transport: string;
  readonly #batchSize: MetricRecorder;
  readonly #claimDuration: MetricRecorder;
  readonly #outcomes = new Map<string, OutcomeRecorders>();
  readonly #calls = new Map<Transport, Map<string, CallRecorders>>();
  readonly #unregister: (() => void)[] = [];
  /** Destinations of the routes or seen since: their gauges are reported as 0 when they have nothing. */
  readonly #destinations = new Set<string>();
  #cached: { at: number; value: Promise<OutboxGauges | null> } | undefined;
  #slotLagCached: { at: number; value: Promise<WakeSlotLag | null> } | undefined;
  /** Entries touched by the call or batch being tallied (reused: no allocation per call). */
  readonly #touchedCalls: CallRecorders[] = [];
  readonly #touchedOutcomes: OutcomeRecorders[] = [];
  #call = 0;

  constructor(metrics: Metrics, deps: RelayMetricsDeps) {
    this.#metrics = metrics;
    this.#deps = deps;
    this.#transport = transportLabel(deps.routes);
    for (const r of deps.routes) for (const d of r.destinations ?? []) this.#destinations.add(d);
    this.#batchSize = metrics.recorder('relayBatchSize', [this.#transport]);
    this.#claimDuration = metrics.recorder('relayClaimDuration', [this.#transport]);
    this.#unregister.push(
      metrics.observe('relayLeasesHeld', (report) => report(deps.leasesHeld(), [])),
      metrics.observe('relayCircuitOpen', (report) => {
        const open = new Set(deps.openCircuits().map((c) => c.destination));
        for (const d of open) this.#destinations.add(d);
        for (const d of this.#destinations) report(open.has(d) ? 1 : 0, [d, this.#transportOf(d)]);
      }),
    );
    if (deps.store.wakeSlotLag) {
      this.#unregister.push(
        metrics.observe('relayWalSlotLag', async (report) => {
          const lag = await this.#slotLag();
          if (lag !== null) report(lag.bytes, []);
        }),
        metrics.observe('relayWalSlotConfirmedAge', async (report) => {
          const lag = await this.#slotLag();
          if (lag !== null && lag.confirmedAgeSeconds !== null) report(lag.confirmedAgeSeconds, []);
        }),
      );
    }
    if (deps.store.outboxGauges) {
      const perDestination = (pick: (d: OutboxGauges['destinations'][number]) => number) => async (report: (v: number, l: readonly string[]) => void) => {
        const gauges = await this.#gauges();
        if (!gauges) return;
        const now = new Map(gauges.destinations.map((d) => [d.destination, d]));
        for (const d of now.keys()) this.#destinations.add(d);
        for (const d of this.#destinations) {
          const row = now.get(d);
          report(row ? pick(row) : 0, [d]);
        }
      };
      this.#unregister.push(
        metrics.observe('relayBacklog', perDestination((d) => d.pending)),
        metrics.observe('relayOldestPendingAge', perDestination((d) => d.oldestPendingSeconds)),
        metrics.observe('relayParked', perDestination((d) => d.parked)),
        metrics.observe('relayRelaysAlive', async (report) => {
          const gauges = await this.#gauges();
          if (gauges) report(gauges.relaysAlive, []);
        }),
      );
    }
  }

  /** One claim statement returned `size` events after `seconds`. Never throws (nor do `called` and `completed`): metrics must not stop the relay. */
  claimed(size: number, seconds: number): void {
    try {
      this.#claimed(size, seconds);
    } catch (err) {
      this.#recordFailed(err);
    }
  }

  called(transport: Transport, events: readonly StoredEvent[], outcomes: readonly PublishOutcome[], seconds: number): void {
    try {
      this.#called(transport, events, outcomes, seconds);
    } catch (err) {
      this.#recordFailed(err);
    }
  }

  completed(events: readonly StoredEvent[], completed: readonly Completion[], rejected: number, leaseValid: (bucket: number, token: string) => boolean): void {
    try {
      this.#completed(events, completed, rejected, leaseValid);
    } catch (err) {
      this.#touchedCalls.length = 0;
      this.#touchedOutcomes.length = 0;
      this.#recordFailed(err);
    }
  }

  #recordFailed(err: unknown): void {
    this.#deps.onRecordError?.(err instanceof Error ? err : new Error(String(err)));
  }

  #claimed(size: number, seconds: number): void {
    this.#claimDuration.record(seconds);
    if (size > 0) this.#batchSize.record(size);
  }

  /**
   * One transport call for `events` ended after `seconds` with `outcomes`.
   * Observed once per destination of the call: the call's duration, and the
   * commit-to-ack time of its oldest acked event (the call's highest). A
   * record per event would cost more than the 3% of the drain rate
   * docs/performance.md allows (bench/metrics-cost.ts).
   */
  #called(transport: Transport, events: readonly StoredEvent[], outcomes: readonly PublishOutcome[], seconds: number): void {
    let byDestination = this.#calls.get(transport);
    if (!byDestination) this.#calls.set(transport, (byDestination = new Map()));
    const call = ++this.#call;
    const touched = this.#touchedCalls;
    let lastDestination: string | undefined;
    let r: CallRecorders | undefined;
    for (let i = 0; i < events.length; i++) {
      const e = events[i]!;
      // Runs of one destination (the usual case) need no map lookup.
      if (e.destination !== lastDestination || !r) {
        lastDestination = e.destination;
        r = byDestination.get(e.destination);
      }
      if (!r) {
        const labels = [e.destination, transport.name];
        r = { duration: this.#metrics.recorder('relayPublishDuration', labels), commitToAck: this.#metrics.recorder('relayCommitToAck', labels), call: 0, oldestAckedMs: Number.NaN };
        byDestination.set(e.destination, r);
      }
      if (r.call !== call) {
        r.call = call;
        r.oldestAckedMs = Number.NaN;
        touched.push(r);
      }
      const created = e.createdAtMs;
      if (created !== undefined && outcomes[i]?.ok && !(created >= r.oldestAckedMs)) r.oldestAckedMs = created;
    }
    const now = Date.now();
    for (const r of touched) {
      r.duration.record(seconds);
      if (!Number.isNaN(r.oldestAckedMs)) r.commitToAck.record(Math.max(0, now - r.oldestAckedMs) / 1000);
    }
    touched.length = 0;
  }

  /**
   * The store took `completed` (sorted events of the batch: `events`), and
   * refused `rejected` of them by the fence. The store says how many, not
   * which: those whose bucket lease this relay no longer holds count as
   * fenced first, then (rarely) the last ones of the batch.
   */
  #completed(events: readonly StoredEvent[], completed: readonly Completion[], rejected: number, leaseValid: (bucket: number, token: string) => boolean): void {
    let fenced: Set<Completion> | undefined;
    if (rejected > 0) {
      fenced = new Set();
      for (const c of completed) {
        if (fenced.size >= rejected) break;
        const e = findBySeq(events, c.seq);
        if (e && !leaseValid(e.bucket, c.token)) fenced.add(c);
      }
      for (let i = completed.length - 1; i >= 0 && fenced.size < rejected; i--) fenced.add(completed[i]!);
    }
    // Counted per destination over the batch, then added once each: one record per batch, not per event.
    const touched = this.#touchedOutcomes;
    const only = oneDestination(events);
    if (only !== undefined) {
      // One destination in the batch (the usual case): no lookup per completion.
      const r = this.#outcomesOf(only);
      for (const c of completed) {
        if (c.outcome !== 'defer') r.counts[fenced?.has(c) ? FENCED : c.outcome === 'published' ? PUBLISHED : c.outcome === 'retry' ? RETRIED : PARKED]++;
      }
      touched.push(r);
    } else for (const c of completed) {
      if (c.outcome === 'defer') continue;
      const e = findBySeq(events, c.seq);
      if (!e) continue;
      const r = this.#outcomesOf(e.destination);
      if (r.counts[0] + r.counts[1] + r.counts[2] + r.counts[3] === 0) touched.push(r);
      r.counts[fenced?.has(c) ? FENCED : c.outcome === 'published' ? PUBLISHED : c.outcome === 'retry' ? RETRIED : PARKED]++;
    }
    for (const r of touched) {
      for (let i = 0; i < 4; i++) {
        if (r.counts[i]! > 0) r.recorders[i]!.record(r.counts[i]!);
        r.counts[i] = 0;
      }
    }
    touched.length = 0;
  }

  /** Unregisters the gauges (the relay stopped). */
  close(): void {
    for (const u of this.#unregister.splice(0)) u();
  }

  #outcomesOf(destination: string): OutcomeRecorders {
    let r = this.#outcomes.get(destination);
    if (!r) {
      const t = this.#transportOf(destination);
      const rec = (outcome: string) => this.#metrics.recorder('relayEvents', [destination, t, outcome]);
      r = { recorders: [rec('published'), rec('retried'), rec('parked'), rec('fenced')], counts: [0, 0, 0, 0] };
      this.#outcomes.set(destination, r);
      this.#destinations.add(destination);
    }
    return r;
  }

  /** The transports of the routes that take `destination` (any type). */
  #transportOf(destination: string): string {
    if (this.#deps.routes.length === 1) return this.#transport;
    return transportLabel(this.#deps.routes.filter((r) => r.destinations === null || r.destinations.has(destination))) || this.#transport;
  }

  /** The slot's lag for both of its gauges: one query per collection (concurrent reads within 1 s share it). */
  #slotLag(): Promise<WakeSlotLag | null> {
    const now = performance.now();
    if (this.#slotLagCached && now - this.#slotLagCached.at < 1000) return this.#slotLagCached.value;
    const value = this.#deps.store.wakeSlotLag!().catch(() => null);
    this.#slotLagCached = { at: now, value };
    return value;
  }

  /** The database gauges, read at most once per `gaugeCacheMs` (concurrent collections share one read). */
  #gauges(): Promise<OutboxGauges | null> {
    const now = performance.now();
    if (this.#cached && now - this.#cached.at < this.#deps.gaugeCacheMs) return this.#cached.value;
    const value = this.#deps.store.outboxGauges!().catch((err: Error) => {
      this.#deps.onGaugeError?.(err);
      this.#cached = undefined; // the next collection tries again
      return null;
    });
    this.#cached = { at: now, value };
    return value;
  }
}

/** The distinct transport names of `routes`, joined by `+`. */
function transportLabel(routes: readonly ResolvedRoute[]): string {
  return [...new Set(routes.map((r) => r.transport.name))].join('+');
}

/** The destination of every event of the batch, or undefined when they have several. */
function oneDestination(events: readonly StoredEvent[]): string | undefined {
  const first = events[0]?.destination;
  for (let i = 1; i < events.length; i++) if (events[i]!.destination !== first) return undefined;
  return first;
}

/** Events of a claim are in outbox order (ascending seq): binary search, no allocation. */
function findBySeq(events: readonly StoredEvent[], seq: number): StoredEvent | undefined {
  let lo = 0;
  let hi = events.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const s = events[mid]!.seq;
    if (s === seq) return events[mid];
    if (s < seq) lo = mid + 1;
    else hi = mid - 1;
  }
  return events.find((e) => e.seq === seq);
}
