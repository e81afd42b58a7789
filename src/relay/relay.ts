import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { keyHash, TypedEmitter } from '../core/emitter.ts';
import type { StoredEvent } from '../core/envelope.ts';
import type { Completion, Transport } from '../core/ports.ts';
import { DestinationBreakers, type CircuitChange } from './destination-breaker.ts';
import { completeIsolating } from './complete-isolating.ts';
import { untilAborted } from '../core/abort.ts';
import { LeaseKeeper, leaseRenewEveryMs, type LeaseChange } from './lease-keeper.ts';
import { publishBatch } from './publish-batch.ts';
import { RelayLog } from './relay-log.ts';
import { RateWindow } from './rate-window.ts';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './relay-options.ts';
import { RelayMetrics } from './relay-metrics.ts';
import { RelayHealth } from './relay-health.ts';
import { defaultMetrics } from '../metrics/otel/otel-metrics.ts';
import { noopMetrics } from '../core/metrics.ts';
import type { HealthReport, HealthSource } from '../core/health.ts';

/** The abort reason of a lane's wait that ended (made once: see #laneWait). */
const LANE_WAIT_ENDED = new Error('txbox relay: the lane stopped waiting');

/** Lifecycle events of a relay; metrics and logs subscribe to them. */
export interface RelayEvents {
  /** The transport is connected and the first leases taken: the relay is ready. `buckets`: leases held now (0 while other relays hold them all). */
  started: { readonly relayId: string; readonly buckets: number };
  stopped: { readonly relayId: string; readonly releasedBuckets: number };
  leases: LeaseChange & { readonly relayId: string };
  batch: {
    readonly lane: number;
    readonly claimed: number;
    readonly published: number;
    readonly retried: number;
    readonly parked: number;
    readonly rejected: number;
    readonly durationMs: number;
  };
  retry: { readonly id: string; readonly type: string; readonly keyHash: string; readonly attempts: number; readonly delayMs: number; readonly error: string };
  parked: { readonly id: string; readonly type: string; readonly keyHash: string; readonly attempts: number; readonly error: string };
  /** Events of a batch left pending, unsent or unacked, because the lease of their bucket ended locally (not renewed in time). */
  leaseEnded: { readonly lane: number; readonly left: number };
  /** Completions the database refused because this relay's lease had expired or moved. */
  fenced: { readonly lane: number; readonly rejected: number };
  /** Published rows removed by retention. */
  pruned: { readonly deleted: number };
  error: { readonly phase: 'lease' | 'claim' | 'complete' | 'retention'; readonly error: Error };
  /** A destination's circuit opened (it answered as down), stayed open after a probe, or closed. */
  circuit: CircuitChange & { readonly relayId: string };
}

/**
 * Moves events from the outbox to a transport: claims batches from the
 * buckets it leases, publishes them (per-key order, many keys at once),
 * waits for acks, then marks them, fenced by the lease token.
 *
 * @example
 * const relay = createRelay({ store: new PostgresRelayStore({ connection }), transport: new HttpTransport({ endpoints }) });
 * await relay.start();
 * process.on('SIGTERM', () => relay.stop());
 */
export class Relay extends TypedEmitter<RelayEvents> implements HealthSource {
  readonly options: ResolvedRelayOptions;
  readonly #leases: LeaseKeeper;
  readonly #log: RelayLog;
  readonly #rate = new RateWindow(60);
  readonly #breakers: DestinationBreakers;
  #stopClaiming = new AbortController();
  /**
   * Aborted, and replaced, when a lease tick acquires buckets: it ends the
   * lanes' waits, so that the backlog of buckets taken over (from a relay that
   * died, or in a rebalance) is claimed at once. Their rows were committed
   * before this relay held them, so no wake-up of this relay will announce them.
   */
  #acquired = new AbortController();
  #stopNow = new AbortController();
  #loops: Promise<void>[] = [];
  #state: 'idle' | 'running' | 'stopping' = 'idle';
  #inFlight = 0;
  #publishedTotal = 0;
  #stopping: Promise<void> | undefined;
  #crashed = false;
  #metrics: RelayMetrics | undefined;
  readonly #health = new RelayHealth();

  constructor(options: RelayOptions) {
    super();
    this.options = resolveRelayOptions(options);
    this.#leases = new LeaseKeeper(this.options.store, this.options.relayId, this.options.leaseTtlMs);
    this.#log = new RelayLog(this, {
      logger: this.options.logger,
      relayId: this.relayId,
      summaryIntervalMs: this.options.logSummaryIntervalMs,
      snapshot: () => ({ leasesHeld: this.#leases.size, inFlight: this.#inFlight }),
      ...(this.options.store.backlog ? { backlog: () => this.options.store.backlog!() } : {}),
    });
    this.#breakers = new DestinationBreakers(this.options.circuitBreaker, {
      probeTimeoutMs: 2 * this.options.publishTimeoutMs,
      onChange: (change) => this.emit('circuit', { ...change, relayId: this.relayId }),
    });
  }

  get relayId(): string {
    return this.options.relayId;
  }

  get publishedTotal(): number {
    return this.#publishedTotal;
  }

  /** Bucket leases this relay holds now. */
  get heldBuckets(): number {
    return this.#leases.size;
  }

  /**
   * Connects the transports, takes the first leases and readies the store's connections (`RelayStore.warm`),
   * at the same time, then starts the claim loops.
   * Resolves once running. If a transport's start or the first lease tick fails, start() waits for the
   * other to end, gives back the leases taken and closes the transports it opened; the relay is idle
   * again and start() rejects (a transport's error first); it can be called again.
   */
  async start(): Promise<void> {
    if (this.#state !== 'idle') throw new Error(`relay is ${this.#state}; create a new relay to start again`);
    this.#state = 'running';
    this.#stopClaiming = new AbortController();
    this.#stopNow = new AbortController();
    const opened: Transport[] = [];
    const startTransports = async (): Promise<void> => {
      // One after another: routes may share a transport.
      for (const r of this.options.routes) {
        opened.push(r.transport);
        await r.transport.start?.(this.#stopNow.signal);
      }
    };
    try {
      // A relay that starts (or takes over from one that crashed) connects to its brokers while the
      // database answers its first heartbeat and lease: one wait instead of two before it publishes.
      // The store readies a connection per lane meanwhile (it never rejects).
      const [transports, leases] = await Promise.allSettled([startTransports(), this.#tickLeases(), this.options.store.warm?.(this.options.lanes)]);
      if (transports.status === 'rejected') throw transports.reason;
      if (leases.status === 'rejected') throw leases.reason;
      const metrics = this.options.metrics ?? defaultMetrics();
      // Off (metrics: false, or no OpenTelemetry API installed): no metrics work at all on the hot path.
      this.#metrics = metrics === noopMetrics ? undefined : new RelayMetrics(metrics, {
        routes: this.options.routes,
        store: this.options.store,
        leasesHeld: () => this.#leases.size,
        openCircuits: () => this.#breakers.open(),
        gaugeCacheMs: this.options.metricsCacheMs,
        onGaugeError: (err) => this.options.logger.warn({ relayId: this.relayId, err: err.message }, 'txbox relay: reading the metrics gauges failed'),
        onRecordError: (err) => this.options.logger.error({ relayId: this.relayId, err: err.message }, 'txbox relay: recording a metric failed (publishing goes on)'),
      });
    } catch (err) {
      // Back to idle with nothing left open, so that start() can be called again.
      this.#stopNow.abort();
      await this.#leases.leave().catch(() => {});
      await Promise.all(opened.map((t) => t.close().catch(() => {})));
      await this.options.store.close().catch(() => {});
      this.#state = 'idle';
      throw err;
    }
    this.#loops = [this.#leaseLoop(), this.#retentionLoop()];
    for (let lane = 0; lane < this.options.lanes; lane++) this.#loops.push(this.#laneLoop(lane));
    this.#log.start();
    this.emit('started', { relayId: this.relayId, buckets: this.#leases.size });
  }

  /**
   * Graceful stop: no new claims; in-flight batches finish (published, acked,
   * marked) within `stopTimeoutMs`, then are aborted and left pending; leases
   * are released so other relays take over at once.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  /**
   * Stops at once, as a crash would: in-flight publishes are aborted and
   * nothing more is marked; leases are not released and expire by
   * themselves. Events in flight are published again by the next relay
   * (at-least-once). For chaos tests and demos; use `stop()` otherwise.
   */
  async abort(): Promise<void> {
    this.#crashed = true;
    this.#log.stop();
    this.#stopNow.abort();
    this.#stopClaiming.abort();
    this.#state = 'stopping';
    await Promise.allSettled(this.#loops);
    await this.#closeAll();
  }

  async #stop(): Promise<void> {
    if (this.#state === 'idle') return;
    this.#state = 'stopping';
    this.#log.stop();
    this.#stopClaiming.abort();
    const timer = setTimeout(() => this.#stopNow.abort(), this.options.stopTimeoutMs);
    await Promise.allSettled(this.#loops);
    clearTimeout(timer);
    let releasedBuckets = 0;
    const boundMs = finalStatementMs(this.options.leaseTtlMs);
    try {
      // Bounded: a database that stopped answering must not hold stop() forever (the leases expire by themselves).
      releasedBuckets = await untilAborted(this.#leases.leave(), AbortSignal.timeout(boundMs));
    } catch (err) {
      if (isTimeout(err)) {
        this.options.logger.warn({ relayId: this.relayId, timeoutMs: boundMs }, `txbox relay: releasing the leases (leave) did not answer within ${boundMs} ms; the leases expire by themselves`);
      } else {
        this.options.logger.warn({ err: (err as Error).message }, 'txbox relay: could not release leases; they expire by themselves');
      }
    }
    await this.#closeAll();
    this.emit('stopped', { relayId: this.relayId, releasedBuckets });
  }

  async #closeAll(): Promise<void> {
    this.#metrics?.close();
    const boundMs = finalStatementMs(this.options.leaseTtlMs);
    await untilAborted(this.options.store.close(), AbortSignal.timeout(boundMs)).catch((err: unknown) => {
      if (isTimeout(err)) this.options.logger.warn({ relayId: this.relayId, timeoutMs: boundMs }, `txbox relay: closing the store did not finish within ${boundMs} ms; stopping without waiting for it`);
    });
    await Promise.all(this.options.routes.map((r) => r.transport.close().catch(() => {})));
  }

  /**
   * Live while running; ready while the database answers, the lease
   * renewals go through and no destination's circuit is open. Reads only
   * the relay's own state (no query): cheap enough for every probe.
   */
  health(): Promise<HealthReport> {
    return Promise.resolve(
      this.#health.report({
        running: this.#state === 'running' && !this.#crashed,
        leaseTtlMs: this.options.leaseTtlMs,
        leasesHeld: this.#leases.size,
        openCircuits: this.#breakers.open(),
      }),
    );
  }

  async #tickLeases(): Promise<void> {
    const change = await this.#leases.tick({
      inFlight: this.#inFlight,
      publishedTotal: this.#publishedTotal,
      ratePerMinute: this.#rate.total(),
      host: hostname(),
      pid: process.pid,
      circuits: this.#breakers.open(),
    }).catch((err: unknown) => {
      this.#health.dbFailed(err);
      throw err;
    });
    this.#health.leaseTicked();
    if (change.acquired > 0) {
      const acquired = this.#acquired;
      this.#acquired = new AbortController();
      acquired.abort();
    }
    if (change.acquired || change.lost || change.released) this.emit('leases', { ...change, relayId: this.relayId });
  }

  /** A signal for one wait of a lane: aborted when the relay stops claiming or a lease tick acquires buckets; `end()` after the wait. */
  #laneWait(): { readonly signal: AbortSignal; end(): void } {
    const wait = new AbortController();
    const stopping = this.#stopClaiming.signal;
    const acquired = this.#acquired.signal;
    // A reason of its own: abort() without one builds a DOMException, with its stack, at every wait's end.
    const stop = (): void => wait.abort(LANE_WAIT_ENDED);
    if (stopping.aborted) stop();
    stopping.addEventListener('abort', stop, { once: true });
    acquired.addEventListener('abort', stop, { once: true });
    return {
      signal: wait.signal,
      end: () => {
        stop(); // ends the store's wait at once (no poll), if it is still waiting
        stopping.removeEventListener('abort', stop);
        acquired.removeEventListener('abort', stop);
      },
    };
  }

  async #leaseLoop(): Promise<void> {
    const signal = this.#stopClaiming.signal;
    const every = leaseRenewEveryMs(this.options.leaseTtlMs);
    while (!signal.aborted) {
      await sleep(this.#leases.nextTickDelayMs(every), undefined, { signal }).catch(() => {});
      if (signal.aborted) break;
      try {
        // A renewal that hangs (database unreachable) must not hold up stop() beyond stopTimeoutMs.
        await untilAborted(this.#tickLeases(), this.#stopNow.signal);
      } catch (err) {
        if (this.#stopNow.signal.aborted) break;
        this.emit('error', { phase: 'lease', error: err as Error });
      }
    }
  }

  async #retentionLoop(): Promise<void> {
    const { retention, store } = this.options;
    if (!retention || !store.prune) return;
    const signal = this.#stopClaiming.signal;
    while (!signal.aborted) {
      await sleep(retention.intervalMs, undefined, { signal }).catch(() => {});
      let deleted = 0;
      try {
        for (;;) {
          if (signal.aborted) break;
          const n = await store.prune(retention.keepPublishedMs, retention.batchSize);
          deleted += n;
          if (n < retention.batchSize) break;
        }
      } catch (err) {
        this.emit('error', { phase: 'retention', error: err as Error });
      }
      if (deleted > 0) this.emit('pruned', { deleted });
    }
  }

  async #laneLoop(lane: number): Promise<void> {
    // The lane's published batches still being marked (stores with claimWhileMarking only): see Marking.
    const marking: Marking = { current: null, queue: [], queued: 0 };
    try {
      await this.#claimLoop(lane, marking);
    } finally {
      await marking.current;
    }
  }

  async #claimLoop(lane: number, marking: Marking): Promise<void> {
    const { store, batchSize, lanes, pollIntervalMs, minPollIntervalMs, skipParkedDestinations } = this.options;
    const signal = this.#stopClaiming.signal;
    const options = { limit: batchSize, skipParkedDestinations };
    let failures = 0;
    // Empty claims since the last busy one: the wait doubles from minPollIntervalMs up to pollIntervalMs.
    let idle = 0;
    while (!signal.aborted) {
      const { leases, buckets, tokens } = this.#leases.laneLeases(lane, lanes);
      if (leases.length === 0) {
        await marking.current;
        const wait = this.#laneWait();
        await sleep(Math.min(pollIntervalMs, this.options.leaseTtlMs / 3), undefined, { signal: wait.signal }).catch(() => {});
        wait.end();
        continue;
      }
      let events;
      // A lane waits for its own buckets: the WAL wake mode wakes only the lanes of a commit's buckets.
      const seen = store.wakeups?.(buckets);
      const claimStarted = performance.now();
      // A claim that runs while the previous batch is being marked leaves out the rows of that batch's
      // keys: when it finds nothing, it is no answer yet (also when the mark ended during the claim).
      // Nor is the ordinary claim the lane ran after waiting for that mark, on purpose: the lane claims
      // once more at once. In the notify mode that catches commits whose NOTIFY the producers' throttle
      // (notifyIntervalMs) left out; without it (tried 28 Nov 2026: 15-20% fewer claims in bench/wal.ts)
      // NOTIFY's p50 at 1,000 events/s rose from 2.4 to 2.7 ms. In the WAL mode it is mostly no query.
      const whileMarking = marking.current !== null;
      try {
        // While the previous batch is being marked its rows are still pending: only a claim that
        // knows to leave them (and every later row of their keys) out may run; else wait for the mark.
        // A claim that hangs (a silent database, until the store's statement timeout) must not hold up
        // stop() beyond stopTimeoutMs: it only reads, so it is left to end by itself.
        events = marking.current === null ? null : await untilAborted(store.claimWhileMarking!(leases, options), this.#stopNow.signal);
        if (events === null) {
          await marking.current;
          events = await untilAborted(store.claim(leases, options), this.#stopNow.signal);
        }
        failures = 0;
        this.#health.dbOk();
        this.#metrics?.claimed(events.length, (performance.now() - claimStarted) / 1000);
      } catch (err) {
        if (this.#stopNow.signal.aborted) break;
        this.#health.dbFailed(err);
        this.emit('error', { phase: 'claim', error: err as Error });
        await sleep(Math.min(5000, 200 * 2 ** failures++), undefined, { signal }).catch(() => {});
        continue;
      }
      if (events.length === 0 && whileMarking) {
        // Nothing announced, or only rows behind the batch being marked: wait for a commit in these buckets
        // or for the mark, whichever comes first, and claim again. A mark that ended during the claim ends
        // no wait: the rows it held back are claimable now, and no commit will announce them again.
        if (marking.current !== null) await this.#waitOrMarked(marking.current, seen, buckets);
        continue;
      }
      if (events.length === 0) {
        const wait = this.#laneWait();
        try {
          await store.waitForEvents(Math.min(pollIntervalMs, minPollIntervalMs * 2 ** Math.min(idle++, 30)), wait.signal, seen, buckets);
        } finally {
          wait.end();
        }
        // A notification means producers are committing, and not every commit notifies
        // (the outbox store's notifyIntervalMs): poll quickly again.
        if (store.wakeups?.(buckets) !== seen) idle = 0;
        continue;
      }
      idle = 0;
      const busy = new Set(events.map((e) => e.bucket));
      const started = performance.now();
      this.#leases.markBusy(busy);
      this.#inFlight += events.length;
      let leftByLease = 0;
      let marked: Promise<void> | undefined;
      try {
        const completions = await publishBatch(events, {
          routes: this.options.routes,
          retry: this.options.retry,
          publishTimeoutMs: this.options.publishTimeoutMs,
          signal: this.#stopNow.signal,
          tokenOf: (bucket) => tokens.get(bucket)!,
          leaseValid: (bucket, token) => this.#leases.isValid(bucket, token),
          leaseDeadline: (bucket, token) => this.#leases.deadlineOf(bucket, token),
          onFailure: (event, c) => this.#reportFailure(event, c),
          breakers: this.#breakers,
          onLeaseEnded: (left) => {
            leftByLease += left;
          },
          onCall: (transport, called, outcomes, seconds) => this.#metrics?.called(transport, called, outcomes, seconds),
        });
        if (leftByLease > 0) this.emit('leaseEnded', { lane, left: leftByLease });
        const batch: Published = { events, completions, started, busy };
        if (store.claimWhileMarking === undefined) marked = this.#markAll(lane, [batch]);
        else {
          // The lane claims on while its batches are marked, one mark at a time: a batch published during a mark
          // waits in the queue, and the queue goes in the next mark as one statement, of at most batchSize events
          // (a batch that would make it larger waits for the marks).
          while (marking.current !== null && marking.queued + events.length > batchSize) await marking.current;
          if (marking.current === null) marking.current = this.#markChain(lane, marking, batch);
          else {
            marking.queue.push(batch);
            marking.queued += events.length;
          }
          marked = marking.current;
        }
      } finally {
        if (marked === undefined) {
          this.#inFlight -= events.length;
          this.#leases.markIdle(busy);
        }
      }
      if (store.claimWhileMarking === undefined) await marked;
    }
  }

  /** Marks `first`, then whatever the lane queued meanwhile, until the queue is empty; then the lane has no mark running. */
  async #markChain(lane: number, marking: Marking, first: Published): Promise<void> {
    try {
      for (let next = [first]; next.length > 0; next = marking.queue.splice(0)) {
        marking.queued = 0;
        await this.#markAll(lane, next);
      }
    } finally {
      marking.current = null;
    }
  }

  /** One completion statement for `batches` (reported as one batch); their events leave the in-flight count after it. */
  async #markAll(lane: number, batches: readonly Published[]): Promise<void> {
    try {
      await this.#complete(lane, batches.flatMap((b) => b.events), batches.flatMap((b) => b.completions), batches[0]!.started);
    } catch (error) {
      this.emit('error', { phase: 'complete', error: error as Error });
    } finally {
      for (const b of batches) {
        this.#inFlight -= b.events.length;
        this.#leases.markIdle(b.busy);
      }
    }
  }

  /** Until a wake-up of `buckets` (since `seen`), the end of `mark`, a lease tick that acquires buckets, or the relay stops claiming. */
  async #waitOrMarked(mark: Promise<void>, seen: number | undefined, buckets: readonly number[]): Promise<void> {
    const wait = this.#laneWait();
    try {
      await Promise.race([mark, this.options.store.waitForEvents(this.options.pollIntervalMs, wait.signal, seen, buckets)]);
    } finally {
      wait.end(); // the mark came first: the store's wait ends at once
    }
  }

  async #complete(lane: number, events: readonly StoredEvent[], completions: Completion[], started: number): Promise<void> {
    if (this.#crashed) return;
    // Transient failures are retried, then left pending (published again: at-least-once); a completion
    // the store refuses deterministically is isolated by bisection and parked (complete-isolating.ts).
    const result = await completeIsolating(completions, {
      store: this.options.store,
      relayId: this.relayId,
      signal: this.#stopNow.signal,
      onError: (error) => this.emit('error', { phase: 'complete', error }),
    });
    if (result.isolated.length > 0) {
      const bySeq = new Map(events.map((e) => [e.seq, e]));
      for (const c of result.isolated) {
        const event = bySeq.get(c.seq);
        if (event) this.#reportFailure(event, c);
      }
    }
    this.#metrics?.completed(events, result.completed, result.rejected, (bucket, token) => this.#leases.isValid(bucket, token));
    if (result.completed.length === 0) return;
    const published = result.completed.filter((c) => c.outcome === 'published').length;
    this.#publishedTotal += published;
    this.#rate.add(published);
    if (result.rejected > 0) this.emit('fenced', { lane, rejected: result.rejected });
    this.emit('batch', {
      lane,
      claimed: events.length,
      published,
      retried: result.completed.filter((c) => c.outcome === 'retry').length,
      parked: result.completed.filter((c) => c.outcome === 'park').length,
      rejected: result.rejected,
      durationMs: performance.now() - started,
    });
  }

  #reportFailure(event: { id: string; type: string; key: string; attempts: number }, c: Completion & { outcome: 'retry' | 'park' }): void {
    const base = { id: event.id, type: event.type, keyHash: keyHash(event.key), attempts: event.attempts + 1, error: c.error };
    if (c.outcome === 'retry') this.emit('retry', { ...base, delayMs: c.delayMs });
    else this.emit('parked', base);
  }
}

/**
 * A lane's marks, with claims while marking: `current` runs while the lane
 * claims and publishes on; batches published meanwhile wait in `queue` and go
 * in the next mark together (fewer statements when marks are slow). The rows
 * of every batch in it are still pending in the table, so a claim while
 * marking leaves them and every later row of their keys out; the ordinary
 * claim waits for `current` (which ends when the queue is empty).
 */
interface Marking {
  current: Promise<void> | null;
  readonly queue: Published[];
  /** Events in `queue`. */
  queued: number;
}

/** A published batch waiting for its mark. */
interface Published {
  readonly events: readonly StoredEvent[];
  readonly completions: Completion[];
  readonly started: number;
  readonly busy: ReadonlySet<number>;
}

/** Creates a relay. See `Relay`. */
export function createRelay(options: RelayOptions): Relay {
  return new Relay(options);
}

/**
 * How long stop() waits for each of its last database calls (leave, then
 * closing the store): the lease TTL, at most 5 s. After the TTL the leases
 * have expired anyway, so waiting longer would gain nothing.
 */
export function finalStatementMs(leaseTtlMs: number): number {
  return Math.min(leaseTtlMs, 5000);
}

function isTimeout(err: unknown): boolean {
  return err instanceof Error && err.name === 'TimeoutError';
}
