import { scrubErrorText, thrownText } from '../core/error-text.ts';
import type { HealthCheck, HealthReport } from '../core/health.ts';
import type { OpenCircuit } from '../core/ports.ts';

export interface RelayHealthState {
  readonly running: boolean;
  readonly leaseTtlMs: number;
  readonly leasesHeld: number;
  readonly openCircuits: readonly OpenCircuit[];
}

/**
 * What `Relay.health()` reports, from what the relay's own loops saw: no
 * extra query, so probes may call it as often as they like. The database
 * counts as reachable while its last round trip (a claim, a lease renewal)
 * succeeded and is younger than the lease TTL; the claim loops poll at least
 * every `pollIntervalMs` and renewals go every third of the TTL.
 */
export class RelayHealth {
  #dbOkAt = Number.NEGATIVE_INFINITY;
  #dbFailedAt = Number.NEGATIVE_INFINITY;
  #dbError = '';
  #leaseTickAt = Number.NEGATIVE_INFINITY;

  dbOk(): void {
    this.#dbOkAt = performance.now();
  }

  dbFailed(err: unknown): void {
    this.#dbFailedAt = performance.now();
    this.#dbError = scrubErrorText(thrownText(err), 200);
  }

  leaseTicked(): void {
    this.#leaseTickAt = this.#dbOkAt = performance.now();
  }

  report(state: RelayHealthState): HealthReport {
    const now = performance.now();
    const ago = (t: number) => `${Math.round((now - t) / 100) / 10} s ago`;
    const dbFresh = now - this.#dbOkAt < state.leaseTtlMs;
    const dbOk = state.running && dbFresh && this.#dbOkAt >= this.#dbFailedAt;
    const database: HealthCheck = {
      name: 'database',
      ok: dbOk,
      detail: !state.running
        ? 'relay not running'
        : dbOk
          ? `last round trip ${ago(this.#dbOkAt)}`
          : this.#dbFailedAt > this.#dbOkAt
            ? `last round trip failed ${ago(this.#dbFailedAt)}: ${this.#dbError}`
            : `no successful round trip for ${Math.round((now - this.#dbOkAt) / 1000)} s (lease TTL ${state.leaseTtlMs} ms)`,
    };
    const leasesOk = state.running && now - this.#leaseTickAt < state.leaseTtlMs;
    const leases: HealthCheck = {
      name: 'leases',
      ok: leasesOk,
      detail: !leasesOk
        ? `no lease renewal for ${Math.round((now - this.#leaseTickAt) / 1000)} s (lease TTL ${state.leaseTtlMs} ms)`
        : state.leasesHeld > 0
          ? `holds ${state.leasesHeld} bucket leases, renewed ${ago(this.#leaseTickAt)}`
          : `holds none: waiting for a free bucket (other relays hold them all), checked ${ago(this.#leaseTickAt)}`,
    };
    const down = state.openCircuits.map((c) => c.destination);
    const transport: HealthCheck = {
      name: 'transport',
      ok: state.running && down.length === 0,
      detail: !state.running
        ? 'relay not running'
        : down.length === 0
          ? 'started; no destination down'
          : `circuit open (destination answered as down) for ${down.slice(0, 10).map((d) => JSON.stringify(d)).join(', ')}${down.length > 10 ? ` and ${down.length - 10} more` : ''}`,
    };
    const checks = [database, leases, transport];
    return { live: state.running, ready: state.running && checks.every((c) => c.ok), checks };
  }
}
