import { performance } from 'node:perf_hooks';
import type { TypedEmitter } from '../core/emitter.ts';
import type { Logger } from '../core/logger.ts';
import type { RelayEvents } from './relay.ts';

export interface RelayLogOptions {
  readonly logger: Logger;
  readonly relayId: string;
  /** How often the info summary is logged, in ms; 0: never. */
  readonly summaryIntervalMs: number;
  /** The relay's state now, for the summary. */
  readonly snapshot: () => { readonly leasesHeld: number; readonly inFlight: number };
  /** Pending and parked events of the outbox (one cheap query), when the store can count them. */
  readonly backlog?: () => Promise<{ readonly pending: number; readonly parked: number }>;
}

/** What the info summary logs (also handy for tests and metrics). */
export interface RelaySummary {
  readonly relayId: string;
  /** Events published since the previous summary. */
  readonly published: number;
  readonly batches: number;
  readonly retried: number;
  readonly parked: number;
  /** Events published per second since the previous summary. */
  readonly ratePerSecond: number;
  readonly intervalSeconds: number;
  readonly leasesHeld: number;
  readonly inFlight: number;
  /** Pending events in the outbox (all relays' backlog), or null when it could not be counted. */
  readonly backlog: number | null;
  /** Parked events in the outbox, or null when they could not be counted. */
  readonly parkedTotal: number | null;
}

/**
 * The relay's logs, from its events: lifecycle at info, each batch at debug
 * (lane, counts, duration), one summary at info every `summaryIntervalMs`,
 * failures at warn and error. Ids, types, key hashes and counts only: never
 * payloads, never keys in clear.
 */
export class RelayLog {
  readonly #options: RelayLogOptions;
  #timer: NodeJS.Timeout | undefined;
  #since = performance.now();
  #published = 0;
  #batches = 0;
  #retried = 0;
  #parked = 0;

  constructor(source: Pick<TypedEmitter<RelayEvents>, 'on'>, options: RelayLogOptions) {
    this.#options = options;
    const log = options.logger;
    const relayId = options.relayId;
    source.on('started', (e) => log.info(e, 'txbox relay started'));
    source.on('stopped', (e) => log.info(e, 'txbox relay stopped'));
    source.on('leases', (e) => log.info(e, 'txbox relay leases changed'));
    source.on('batch', (e) => {
      this.#published += e.published;
      this.#batches++;
      this.#retried += e.retried;
      this.#parked += e.parked;
      log.debug({ relayId, ...e, durationMs: Math.round(e.durationMs * 10) / 10 }, 'txbox relay batch');
    });
    source.on('retry', (e) => log.warn({ relayId, ...e }, 'txbox relay: publish failed, will retry'));
    source.on('parked', (e) => log.error({ relayId, ...e }, 'txbox relay: event parked'));
    source.on('leaseEnded', (e) => log.warn({ relayId, ...e }, 'txbox relay: lease ended locally before the batch was done; events left pending for the next owner'));
    source.on('fenced', (e) => log.warn({ relayId, ...e }, 'txbox relay: lease lost, marks rejected by the fence'));
    source.on('error', (e) => log.error({ relayId, phase: e.phase, err: e.error.message }, 'txbox relay error'));
    source.on('circuit', (e) => {
      const at = { relayId, destination: e.destination, reason: e.reason, openSince: e.openSince.toISOString(), failedProbes: e.failedProbes };
      const next = e.nextProbeAt?.toISOString();
      if (e.state === 'open') log.error({ ...at, nextProbeAt: next }, 'txbox relay: destination down, circuit open: its events wait, pending and in order, until a probe succeeds');
      else if (e.state === 'closed') log.warn(at, 'txbox relay: destination answers again, circuit closed');
      else log.debug({ ...at, nextProbeAt: next }, 'txbox relay: probe failed, destination still down');
    });
  }

  /** Starts the periodic summary (a timer that does not keep the process alive). */
  start(): void {
    this.stop();
    this.#since = performance.now();
    if (this.#options.summaryIntervalMs <= 0) return;
    this.#timer = setInterval(() => void this.summarize(), this.#options.summaryIntervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Logs one summary of the time since the previous one and starts a new period. Never throws. */
  async summarize(now: number = performance.now()): Promise<RelaySummary> {
    const o = this.#options;
    const seconds = Math.max(0.001, (now - this.#since) / 1000);
    const counts = { published: this.#published, batches: this.#batches, retried: this.#retried, parked: this.#parked };
    this.#since = now;
    this.#published = this.#batches = this.#retried = this.#parked = 0;
    let backlog: { pending: number; parked: number } | null = null;
    let backlogError: string | undefined;
    if (o.backlog) {
      try {
        backlog = await o.backlog();
      } catch (err) {
        backlogError = (err as Error).message;
      }
    }
    const { leasesHeld, inFlight } = o.snapshot();
    const summary: RelaySummary = {
      relayId: o.relayId,
      ...counts,
      ratePerSecond: Math.round((counts.published / seconds) * 10) / 10,
      intervalSeconds: Math.round(seconds * 10) / 10,
      leasesHeld,
      inFlight,
      backlog: backlog?.pending ?? null,
      parkedTotal: backlog?.parked ?? null,
    };
    o.logger.info(backlogError === undefined ? summary : { ...summary, backlogError }, 'txbox relay summary');
    return summary;
  }
}
