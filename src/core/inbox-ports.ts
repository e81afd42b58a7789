import type { OutboxEvent } from './envelope.ts';
import type { SqlExecutor } from './ports.ts';

/** What became of one received event. */
export type InboxOutcome =
  | { readonly status: 'processed' }
  /** Already processed (or dead) before: the handler did not run. Ack it. */
  | { readonly status: 'duplicate' }
  /** No handler for this type: recorded nowhere; ack it. */
  | { readonly status: 'ignored' }
  /** Waiting in the inbox for an earlier version (projection gap); ack it. */
  | { readonly status: 'held' }
  /** The handler failed; redeliver after `delayMs` (nak with delay). */
  | { readonly status: 'retry'; readonly delayMs: number; readonly attempts: number; readonly error: string }
  /** The handler failed `maxAttempts` times: kept in the inbox as dead; ack it (and dead-letter it on the broker). */
  | { readonly status: 'dead'; readonly attempts: number; readonly error: string };

/** The consumer-side table. */
export interface InboxStore {
  /**
   * Runs `handler` for each event in ONE transaction that first records every
   * (consumer, event id) as processed; the handlers' writes and the marks
   * commit together. `ran[i]` is false when event i was already processed,
   * dead or otherwise taken (its handler did not run). `heldKeys` are keys
   * with events held for a version gap, to re-run after this commit. If a
   * handler throws, everything rolls back and the error is rethrown as an
   * `InboxBatchError` naming the event.
   */
  runBatch(
    consumer: string,
    events: readonly OutboxEvent[],
    handler: (tx: SqlExecutor, event: OutboxEvent) => Promise<void>,
  ): Promise<{ readonly ran: boolean[]; readonly heldKeys: string[] }>;
  /** Records a failed attempt (outside the rolled-back transaction); the row turns dead at `maxAttempts`. */
  recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number): Promise<{ readonly attempts: number; readonly dead: boolean }>;
  /** Keeps an event aside (a version gap) until an earlier version of its key is processed. */
  hold(consumer: string, event: OutboxEvent, reason: string): Promise<void>;
  /**
   * Events to run again now, oldest version first: with `key`, the held events
   * of that key; without, the ones an operator asked to retry.
   */
  redrivable(consumer: string, limit: number, key?: string): Promise<OutboxEvent[]>;
}

/**
 * Receives events from a broker and hands each to an inbox (or, in worker
 * mode, an inbox queue), acking only after that committed. Per-key order is
 * kept while different keys are handled in parallel.
 */
export interface Consumer {
  /** A short name for logs, e.g. `kafka`. */
  readonly name: string;
  /** Connects and subscribes; resolves once receiving. Throws ConfigError naming the setting on bad configuration. */
  start(): Promise<void>;
  /** Stops receiving; events in progress finish (committed and acked) first, within the consumer's stop timeout. */
  stop(): Promise<void>;
}

/** A handler failed inside a batch; the whole batch transaction was rolled back. */
export class InboxBatchError extends Error {
  constructor(
    readonly index: number,
    override readonly cause: unknown,
  ) {
    super(`handler of batch item ${index} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}
