/**
 * The inbox's part of tracing: each event `process` admits gets a CONSUMER
 * span (src/core/consumer-tracing.ts) in which its handler runs, also inside
 * a group-commit batch; the span ends once the outcome is known, after the
 * commit, with status error when the handler failed (retry or dead).
 */
import { startConsumerTrace, type ConsumerTrace } from '../core/consumer-tracing.ts';
import type { OutboxEvent } from '../core/envelope.ts';
import type { InboxOutcome } from '../core/inbox-ports.ts';
import { thrownText } from '../core/error-text.ts';

export { runTraced } from '../core/consumer-tracing.ts';
export type { ConsumerTrace } from '../core/consumer-tracing.ts';

/** Starts the span of an event the inbox admitted, or undefined when nothing is traced. */
export function startInboxTrace(event: OutboxEvent, consumer: string): ConsumerTrace | undefined {
  return startConsumerTrace(event, { consumer });
}

/** Ends `trace` with the outcome of `pending` (`txbox.inbox.outcome`; error status on retry, dead or a thrown error). */
export function settleInboxTrace(trace: ConsumerTrace | undefined, pending: Promise<InboxOutcome>): Promise<InboxOutcome> {
  if (trace === undefined) return pending;
  return pending.then(
    (outcome) => {
      trace.set('txbox.inbox.outcome', outcome.status);
      if (outcome.status === 'retry' || outcome.status === 'dead') trace.fail(`${outcome.status} after attempt ${outcome.attempts}: ${outcome.error}`);
      trace.end();
      return outcome;
    },
    (err: unknown) => {
      trace.fail(thrownText(err));
      trace.end();
      throw err;
    },
  );
}
