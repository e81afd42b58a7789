import type { OutboxEvent } from '../core/envelope.ts';
import { TransportError } from '../core/errors.ts';
import type { PublishOutcome, Transport } from '../core/ports.ts';

/** Decides the fate of one publish attempt: undefined = ack, or an error to fail it with. */
export type FailureRule = (event: OutboxEvent, attempt: number) => TransportError | undefined;

export interface RecordingTransportOptions {
  /** Fails chosen attempts. Default: none. */
  readonly fail?: FailureRule;
  /** Simulated ack latency per call, in ms. Default: 0. */
  readonly latencyMs?: number;
  /** Destinations this transport knows; others fail permanently. Default: any. */
  readonly destinations?: readonly string[];
}

/**
 * An in-memory transport for tests: records every acked event in order and
 * can inject failures. Use it to test your own relay setup; it checks the
 * relay's contract (at most one event per key per call).
 */
export class RecordingTransport implements Transport {
  readonly name = 'recording';
  /** Every acked event, in ack order (duplicates included). */
  readonly acked: OutboxEvent[] = [];
  readonly attempts = new Map<string, number>();
  readonly calls: number[] = [];
  /** Set when the relay broke the one-event-per-key-per-call contract. */
  contractViolation: string | undefined;

  constructor(private readonly options: RecordingTransportOptions = {}) {}

  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.calls.push(events.length);
    const keys = new Set<string>();
    for (const e of events) {
      if (keys.has(e.key)) this.contractViolation ??= `two events of key ${e.key} in one publish call`;
      keys.add(e.key);
    }
    if (this.options.latencyMs) await new Promise((r) => setTimeout(r, this.options.latencyMs));
    if (signal.aborted) throw signal.reason;
    return events.map((event) => {
      const attempt = (this.attempts.get(event.id) ?? 0) + 1;
      this.attempts.set(event.id, attempt);
      if (this.options.destinations && !this.options.destinations.includes(event.destination)) {
        return { ok: false, error: new TransportError('permanent', `unknown destination "${event.destination}"`) };
      }
      const error = this.options.fail?.(event, attempt);
      if (error) return { ok: false, error };
      this.acked.push(event);
      return { ok: true };
    });
  }

  async close(): Promise<void> {}

  /** Acked events grouped by key, in ack order. */
  byKey(): Map<string, OutboxEvent[]> {
    const out = new Map<string, OutboxEvent[]>();
    for (const e of this.acked) {
      const list = out.get(e.key);
      if (list) list.push(e);
      else out.set(e.key, [e]);
    }
    return out;
  }
}
