import type { OutboxEvent } from '../../core/envelope.ts';
import type { Transport } from '../../core/ports.ts';

/**
 * Hands one received event to the downstream service (the inventory service's
 * inbox). A sink acks or answers only after it resolved; when it rejects the
 * sink lets the broker redeliver (nak, 500, no ack).
 */
export type Deliver = (event: OutboxEvent) => Promise<void>;

/** A transport as `txbox relay` reads it from a config file: `type` plus the transport's JSON options. */
export interface RelayTransportConfig {
  readonly type: string;
  readonly [option: string]: unknown;
}

/** A header naming the sender (the relay), which `txbox torture` sets per relay process over HTTP; the HTTP sink records it with each arrival. */
export const SENDER_HEADER = 'x-txbox-torture-relay';

/** One event as it reached the downstream side. `at` is performance.now() in this process. */
export interface Arrival {
  readonly id: string;
  readonly key: string;
  readonly at: number;
  /** Who sent it, when the sender says so (`txbox torture` over HTTP: the relay's id, in an `x-txbox-torture-relay` header). */
  readonly from?: string;
}

/**
 * Where the demo's relay publishes and where it reads deliveries back from:
 * the in-process HTTP receiver, or a real broker.
 */
export interface DemoSink {
  readonly name: string;
  /** Deliveries in arrival order (duplicates included). */
  readonly arrivals: readonly Arrival[];
  /** Starts receiving; every received event goes through `deliver` before it is acked. */
  start(deliver: Deliver): Promise<void>;
  /** A fresh transport (the demo makes a new one after each simulated crash). */
  transport(): Transport;
  /**
   * The same transport as a `txbox relay` configuration (the config file's
   * "transport" object, JSON only), so that relay processes publish where
   * this sink reads. `txbox torture` runs its relays with it. After start().
   */
  relayTransport(): RelayTransportConfig;
  close(): Promise<void>;
}
