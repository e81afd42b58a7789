/**
 * Samples the outbox (and inbox) status every few seconds into a bounded
 * history for the charts, and tells subscribers (the live views) about each
 * new snapshot. One sampler serves every open page, so the database load
 * does not grow with the number of viewers.
 */
import { scrubErrorText, thrownText } from '../core/error-text.ts';
import type { Logger } from '../core/logger.ts';
import type {
  DashboardCircuit,
  DashboardDeadEvent,
  DashboardHeldEvent,
  DashboardInboxConsumer,
  DashboardInboxSource,
  DashboardOutboxSource,
  DashboardOutboxStatus,
  DashboardParkedEvent,
} from './dashboard-source.ts';

export type { DashboardInboxSource, DashboardOutboxSource } from './dashboard-source.ts';

/** One point of the charts. */
export interface DashboardSample {
  /** Unix ms. */
  readonly t: number;
  /** Pending events per destination. */
  readonly pending: Readonly<Record<string, number>>;
  /** Events published in the last minute per destination. */
  readonly publishedPerMinute: Readonly<Record<string, number>>;
}

export interface DashboardSnapshot {
  readonly at: string;
  readonly status: DashboardOutboxStatus | null;
  readonly circuits: readonly DashboardCircuit[];
  readonly parked: readonly DashboardParkedEvent[];
  readonly inbox: { readonly consumers: readonly DashboardInboxConsumer[]; readonly dead: readonly DashboardDeadEvent[]; readonly held: readonly DashboardHeldEvent[] } | null;
  /** Why the last sample failed (the database's message), or null. The rest is the last good snapshot. */
  readonly error: string | null;
  readonly sample: DashboardSample | null;
}

export interface DashboardSamplerOptions {
  readonly admin: DashboardOutboxSource;
  readonly inboxAdmin: DashboardInboxSource | null;
  readonly intervalMs: number;
  readonly historyMs: number;
  readonly listLimit: number;
  readonly showPayloads: boolean;
  readonly logger: Logger;
}

export class DashboardSampler {
  readonly #history: DashboardSample[] = [];
  readonly #listeners = new Set<(snapshot: DashboardSnapshot) => void>();
  readonly #capacity: number;
  #snapshot: DashboardSnapshot = { at: new Date(0).toISOString(), status: null, circuits: [], parked: [], inbox: null, error: null, sample: null };
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<void> | null = null;
  #stopped = false;

  constructor(private readonly options: DashboardSamplerOptions) {
    this.#capacity = Math.max(1, Math.ceil(options.historyMs / options.intervalMs));
  }

  get snapshot(): DashboardSnapshot {
    return this.#snapshot;
  }

  get history(): readonly DashboardSample[] {
    return this.#history;
  }

  /** Starts sampling; the first sample is taken at once. Idempotent. */
  start(): Promise<void> {
    if (this.#timer === null && !this.#stopped) {
      this.#timer = setInterval(() => void this.#sampleOnce(), this.options.intervalMs);
      this.#timer.unref();
    }
    return this.#running ?? this.#sampleOnce();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#listeners.clear();
    await this.#running;
  }

  /** A fresh sample that starts after this call (after an action: the page sees its effect at once). */
  async refresh(): Promise<DashboardSnapshot> {
    await this.#running;
    await this.#sampleOnce();
    return this.#snapshot;
  }

  subscribe(listener: (snapshot: DashboardSnapshot) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #sampleOnce(): Promise<void> {
    if (this.#running) return this.#running; // a slow database: skip the tick rather than pile up queries
    this.#running = this.#take().finally(() => (this.#running = null));
    return this.#running;
  }

  async #take(): Promise<void> {
    const { admin, inboxAdmin, listLimit } = this.options;
    try {
      const [status, circuits, parked, published, inbox] = await Promise.all([
        admin.status(),
        admin.circuits ? admin.circuits() : Promise.resolve([]),
        admin.listParked({ limit: listLimit, ...(this.options.showPayloads ? { includePayload: true } : {}) }),
        admin.publishedPerDestination(60),
        inboxAdmin
          ? Promise.all([inboxAdmin.status(), inboxAdmin.listDead({ limit: listLimit }), inboxAdmin.listHeld({ limit: listLimit })]).then(([consumers, dead, held]) => ({ consumers, dead, held }))
          : Promise.resolve(null),
      ]);
      const sample: DashboardSample = {
        t: Date.now(),
        pending: Object.fromEntries(status.destinations.map((d) => [d.destination, d.pending])),
        publishedPerMinute: Object.fromEntries(published.map((p) => [p.destination, p.published])),
      };
      this.#history.push(sample);
      if (this.#history.length > this.#capacity) this.#history.splice(0, this.#history.length - this.#capacity);
      this.#snapshot = { at: new Date(sample.t).toISOString(), status, circuits, parked, inbox, error: null, sample };
    } catch (err) {
      const message = scrubErrorText(thrownText(err), 500);
      this.options.logger.warn({ err: message }, 'dashboard: sampling the status failed');
      this.#snapshot = { ...this.#snapshot, at: new Date().toISOString(), error: message, sample: null };
    }
    if (this.#stopped) return;
    for (const listener of this.#listeners) listener(this.#snapshot);
  }
}
