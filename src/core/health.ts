/**
 * Health of a running txbox component (a relay, a consumer), as served on
 * `/healthz` (live: the process works) and `/readyz` (ready: it can do its
 * job now). Each check names what it looked at, so an operator reading the
 * JSON knows what is wrong without reading code.
 */
export interface HealthCheck {
  /** What was checked, e.g. `database`, `leases`, `transport`. */
  readonly name: string;
  readonly ok: boolean;
  /** One line for an operator; never a secret or a payload. */
  readonly detail?: string;
}

export interface HealthReport {
  /** The component runs (its loops are not dead). `/healthz` answers 200 when true. */
  readonly live: boolean;
  /** Every check passed. `/readyz` answers 200 when true. */
  readonly ready: boolean;
  readonly checks: readonly HealthCheck[];
}

/** Anything that can report its health: `Relay`, the consumers. */
export interface HealthSource {
  health(): Promise<HealthReport>;
}
