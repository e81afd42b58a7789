import type { OpenCircuit } from '../core/ports.ts';
import type { ResolvedCircuitBreakerOptions } from './relay-options.ts';

/** A change of one destination's circuit, as the relay's `circuit` event. */
export interface CircuitChange {
  readonly destination: string;
  /** `open`: first seen down (logged once); `probe-failed`: still down, next probe later; `closed`: answered again. */
  readonly state: 'open' | 'probe-failed' | 'closed';
  readonly reason: string;
  readonly openSince: Date;
  /** When the next probe goes out (open, probe-failed). */
  readonly nextProbeAt?: Date;
  readonly failedProbes: number;
}

/** Whether an event of a destination may be published now: as usual, as the one probe, or not (held). */
export type Admission = 'send' | 'probe' | 'hold';

interface Circuit {
  reason: string;
  readonly openSince: number;
  nextProbeAt: number;
  failedProbes: number;
  /** When the probe in flight was handed out, or null. */
  probeSince: number | null;
}

export interface DestinationBreakerDeps {
  /** A probe that has not reported after this long (a lost batch) no longer blocks the next one. */
  readonly probeTimeoutMs: number;
  readonly onChange: (change: CircuitChange) => void;
  readonly now?: () => number;
  readonly random?: () => number;
}

/**
 * The relay's per-destination circuit breakers. A destination that a
 * transport reports down (`destination-down`: HTTP 401/403/404, refused,
 * DNS failure, a broker refusing the credentials) opens: its events are held
 * (deferred, pending, attempts unchanged) for a backoff, then one probe event
 * goes out; success closes it, another down answer doubles the pause (equal
 * jitter, capped at `maxDelayMs`). Other destinations are not affected.
 * State is per relay process and in memory; the heartbeat publishes it.
 */
export class DestinationBreakers {
  readonly #circuits = new Map<string, Circuit>();
  readonly #options: ResolvedCircuitBreakerOptions;
  readonly #deps: DestinationBreakerDeps;
  readonly #now: () => number;
  readonly #random: () => number;

  constructor(options: ResolvedCircuitBreakerOptions, deps: DestinationBreakerDeps) {
    this.#options = options;
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.#random = deps.random ?? Math.random;
  }

  /** `send` when closed; `probe` to exactly one caller once the pause is over; `hold` otherwise. */
  admit(destination: string): Admission {
    const c = this.#circuits.get(destination);
    if (!c) return 'send';
    const now = this.#now();
    if (c.probeSince !== null && now - c.probeSince < this.#deps.probeTimeoutMs) return 'hold';
    if (now < c.nextProbeAt) return 'hold';
    c.probeSince = now;
    return 'probe';
  }

  /** How long to hold an event of `destination` before it is claimed again, in ms (0 when closed). */
  holdMs(destination: string): number {
    const c = this.#circuits.get(destination);
    if (!c) return 0;
    const untilProbe = c.nextProbeAt - this.#now();
    // A probe in flight: come back soon, it decides.
    if (c.probeSince !== null || untilProbe <= 0) return Math.min(this.#options.baseDelayMs, Math.max(1, untilProbe));
    return untilProbe;
  }

  /** The destination answered as down. Opens the circuit, or after a failed probe pauses longer. */
  down(destination: string, reason: string, wasProbe: boolean): void {
    const now = this.#now();
    const c = this.#circuits.get(destination);
    if (!c) {
      const opened: Circuit = { reason, openSince: now, nextProbeAt: now + this.#pause(0), failedProbes: 0, probeSince: null };
      this.#circuits.set(destination, opened);
      this.#deps.onChange(this.#change(destination, opened, 'open'));
      return;
    }
    if (!wasProbe) return; // an event already in flight when the circuit opened: nothing new
    c.probeSince = null;
    c.failedProbes++;
    c.reason = reason;
    c.nextProbeAt = now + this.#pause(c.failedProbes);
    this.#deps.onChange(this.#change(destination, c, 'probe-failed'));
  }

  /** A publish to `destination` succeeded: closes its circuit. */
  up(destination: string): void {
    const c = this.#circuits.get(destination);
    if (!c) return;
    this.#circuits.delete(destination);
    this.#deps.onChange(this.#change(destination, c, 'closed'));
  }

  /**
   * The probe got an answer that says nothing about the destination as a
   * whole (its event is retried or parked as usual), or was never sent (the
   * relay stopped, the lease moved): the next probe goes after the same pause.
   */
  probeEnded(destination: string): void {
    const c = this.#circuits.get(destination);
    if (!c || c.probeSince === null) return;
    c.probeSince = null;
    c.nextProbeAt = this.#now() + this.#pause(c.failedProbes);
  }

  /** The open circuits, for the heartbeat (`txbox status`). */
  open(): OpenCircuit[] {
    return [...this.#circuits].map(([destination, c]) => ({
      destination,
      reason: c.reason,
      openSince: new Date(c.openSince),
      nextProbeAt: new Date(c.nextProbeAt),
      failedProbes: c.failedProbes,
    }));
  }

  /** Exponential from baseDelayMs, capped at maxDelayMs, with equal jitter (half to all of it). */
  #pause(failedProbes: number): number {
    const { baseDelayMs, maxDelayMs } = this.#options;
    const exp = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(failedProbes, 40));
    return Math.max(1, Math.round(exp / 2 + this.#random() * (exp / 2)));
  }

  #change(destination: string, c: Circuit, state: CircuitChange['state']): CircuitChange {
    return {
      destination,
      state,
      reason: c.reason,
      openSince: new Date(c.openSince),
      ...(state === 'closed' ? {} : { nextProbeAt: new Date(c.nextProbeAt) }),
      failedProbes: c.failedProbes,
    };
  }
}
