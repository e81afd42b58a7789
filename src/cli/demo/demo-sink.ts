import type { Transport } from '../../core/ports.ts';

/** One event as it reached the downstream side. `at` is performance.now() in this process. */
export interface Arrival {
  readonly id: string;
  readonly key: string;
  readonly at: number;
}

/**
 * Where the demo's relay publishes and where it reads deliveries back from:
 * the in-process HTTP receiver, or a real broker.
 */
export interface DemoSink {
  readonly name: string;
  /** Deliveries in arrival order (duplicates included). */
  readonly arrivals: readonly Arrival[];
  start(): Promise<void>;
  /** A fresh transport (the demo makes a new one after each simulated crash). */
  transport(): Transport;
  close(): Promise<void>;
}
