import { setTimeout as sleep } from 'node:timers/promises';
import type { OutboxEvent } from '../core/envelope.ts';
import type { InboxOutcome, InboxProcessor } from '../core/inbox-ports.ts';

/**
 * Processes an event through the inbox, retrying in place after each
 * `retry` outcome's delay (holding the event's key, so later events of the
 * key wait), until it is processed, a duplicate, ignored, held or dead — the
 * outcomes after which a consumer acks. Resolves `null` when `signal` aborts
 * first: the consumer then leaves the message unacked for redelivery.
 */
export async function processUntilSettled(inbox: InboxProcessor, event: OutboxEvent, signal: AbortSignal): Promise<Exclude<InboxOutcome, { status: 'retry' }> | null> {
  for (;;) {
    if (signal.aborted) return null;
    const outcome = await inbox.process(event);
    if (outcome.status !== 'retry') return outcome;
    try {
      await sleep(outcome.delayMs, undefined, { signal });
    } catch {
      return null;
    }
  }
}
