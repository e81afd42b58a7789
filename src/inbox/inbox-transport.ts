import type { OutboxEvent } from '../core/envelope.ts';
import { TransportError } from '../core/errors.ts';
import type { PublishOutcome, Transport } from '../core/ports.ts';
import { UNTRACED_TRANSPORT } from '../core/tracing.ts';
import type { InboxProcessor } from '../core/inbox-ports.ts';

/**
 * A transport whose "broker" is an inbox: publishing an event runs its
 * handler once (inbox.process). Used by the inbox worker mode, where a relay
 * moves received events from the local inbox queue into the handlers, by
 * bucket, with per-key order, leases and retries.
 */
export class InboxTransport implements Transport {
  readonly name = 'inbox';

  constructor(private readonly inbox: InboxProcessor) {
    // No publish span: handing an event to the local inbox is no hop; `inbox.process` starts its span from the stored trace context.
    Object.defineProperty(this, UNTRACED_TRANSPORT, { value: true });
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    return Promise.all(
      events.map(async (event): Promise<PublishOutcome> => {
        const outcome = await this.inbox.process(event);
        if (outcome.status === 'retry') {
          return { ok: false, error: new TransportError('retriable', `handler failed (attempt ${outcome.attempts}): ${outcome.error}`, { retryAfterMs: outcome.delayMs }) };
        }
        return { ok: true };
      }),
    );
  }

  async close(): Promise<void> {}
}
