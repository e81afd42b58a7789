import type { OutboxEvent } from '../../core/envelope.ts';
import type { InboxOutcome, InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue, QueueRefusal } from '../inbox-worker.ts';
import { backoffMs, pause } from './consumer-core.ts';

/** An inbox outcome after which a consumer acks (or dead-letters). */
export type SettledOutcome = Exclude<InboxOutcome, { status: 'retry' }>;

export interface SettleOptions {
  /** Ends every wait: null is returned and the message is left for redelivery. */
  readonly signal: AbortSignal;
  /** The inbox store itself failed (database down): reported, then retried with backoff. */
  readonly onStoreError: (err: unknown) => void;
  /** Called after an attempt that reached the store, e.g. to log a recovery. */
  readonly onStoreOk?: () => void;
  /** Backoff after the n-th store failure in a row; default 100 ms doubling to 5 s. */
  readonly storeBackoffMs?: (failures: number) => number;
  /**
   * A `retry` outcome (the handler failed): return true to wait its delay
   * here and try again (the key waits), false to give up (null: the adapter
   * redelivers it later). Default: wait.
   */
  readonly onRetry?: (outcome: Extract<InboxOutcome, { status: 'retry' }>) => boolean;
  /** Try once even when `signal` is already aborted (the message was received). */
  readonly firstAttemptWhileStopping?: boolean;
}

/**
 * The shared settle loop of every consumer: processes `event` in the inbox
 * until it is processed, a duplicate, ignored, held or dead; waits out a
 * handler retry's delay in place (its key's later messages wait behind it);
 * retries a failing inbox store with backoff. Null: `signal` aborted or
 * `onRetry` gave up first; the adapter then leaves the message for
 * redelivery, and the inbox skips it if it committed.
 */
export async function settleEvent(inbox: InboxProcessor, event: OutboxEvent, options: SettleOptions): Promise<SettledOutcome | null> {
  const { signal } = options;
  const storeBackoff = options.storeBackoffMs ?? ((n: number) => backoffMs(n, 100, 5000));
  let first = options.firstAttemptWhileStopping === true;
  for (let failures = 0; first || !signal.aborted; ) {
    first = false;
    let outcome: InboxOutcome;
    try {
      outcome = await inbox.process(event);
      options.onStoreOk?.();
    } catch (err) {
      options.onStoreError(err);
      if (!(await pause(storeBackoff(failures++), signal))) return null;
      continue;
    }
    if (outcome.status !== 'retry') return outcome;
    if (options.onRetry && !options.onRetry(outcome)) return null;
    if (!(await pause(outcome.delayMs, signal))) return null;
  }
  return null;
}

/**
 * Worker mode's shared step: stores `events` in the inbox queue in one
 * transaction, retrying an outage with backoff until `signal` aborts (null:
 * release them all for redelivery). Resolves with the refusals by index: the
 * adapter dead-letters those and acks the rest.
 */
export async function receiveQueued(
  queue: InboxQueue,
  events: readonly OutboxEvent[],
  signal: AbortSignal,
  onError: (err: unknown) => void,
  retryBackoffMs: (failures: number) => number = (n) => backoffMs(n, 100, 5000),
): Promise<Map<number, string> | null> {
  for (let failures = 0; ; failures++) {
    let refused: QueueRefusal[];
    try {
      refused = await queue.receive(events);
    } catch (err) {
      onError(err);
      if (!(await pause(retryBackoffMs(failures), signal))) return null;
      continue;
    }
    return new Map(refused.map((r) => [r.index, r.reason]));
  }
}
