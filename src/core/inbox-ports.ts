import type { OutboxEvent } from './envelope.ts';
import type { SqlExecutor } from './ports.ts';
import { thrownText } from './error-text.ts';

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
  | {
      readonly status: 'dead';
      readonly attempts: number;
      readonly error: string;
      /** True when the store refused the event itself, so no inbox row keeps it: a consumer must not ack it silently (dead-letter it, or refuse it). */
      readonly unrecorded?: boolean;
    };

/** The consumer-side table. `Tx`: the transaction type the handlers write through (as `OutboxStore`'s). */
export interface InboxStore<Tx = SqlExecutor> {
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
    handler: (tx: Tx, event: OutboxEvent) => Promise<void>,
    options?: RunBatchOptions,
  ): Promise<{ readonly ran: boolean[]; readonly heldKeys: string[]; readonly held?: boolean[] }>;
  /** Records a failed attempt (outside the rolled-back transaction); the row turns dead at `maxAttempts`. */
  recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number): Promise<{ readonly attempts: number; readonly dead: boolean }>;
  /**
   * Keys of this consumer with held events nobody looked at for `olderThanMs`,
   * oldest first, from at most `limit` held rows; their held rows are stamped
   * as looked at now. The inbox runs each key's held events again: a release
   * that was missed is caught up this way.
   */
  recheckHeld(consumer: string, olderThanMs: number, limit: number): Promise<string[]>;
  /** Keeps an event aside (a version gap) until an earlier version of its key is processed. */
  hold(consumer: string, event: OutboxEvent, reason: string): Promise<void>;
  /**
   * Events to run again now, oldest version first: with `key`, the held events
   * of that key; without, the ones an operator asked to retry, of `types`
   * only when given (the types the calling process has handlers for: the
   * others wait for a process that has, and must not fill every page).
   */
  redrivable(consumer: string, limit: number, key?: string, types?: readonly string[]): Promise<OutboxEvent[]>;
}

export interface RunBatchOptions {
  /**
   * Hold in the handler's own transaction: each handler runs in a savepoint;
   * when it throws and `holdReason` returns a reason (not null), its writes
   * roll back to the savepoint and the event's row turns `held` in the same
   * transaction (`held[i]`), which then commits. Other errors end the batch
   * as usual. With versioned events, transactions of one key are serialized
   * (an advisory lock per key), so a hold cannot slip past the commit of the
   * version it waits for.
   */
  readonly holdReason?: (err: unknown) => string | null;
  /**
   * The longest the batch's handlers may take together (the inbox's
   * `handlerTimeoutMs` for each event): the store bounds the transaction by it
   * plus its own statements' allowance, so that a database gone silent does
   * not hold the transaction until TCP gives up. Undefined: no bound.
   */
  readonly handlersTimeoutMs?: number;
}

/**
 * What a consumer needs of an inbox (`createInbox(...)`): `process`. Any
 * `Inbox<Tx>` fits whatever its store's transaction type (a PostgreSQL or a
 * MySQL inbox), which `Inbox` itself, invariant in `Tx`, would not.
 */
export interface InboxProcessor {
  process(event: OutboxEvent): Promise<InboxOutcome>;
  /**
   * Consecutive events of one key, in order, in one transaction (see
   * `Inbox.processInOrder`); optional: without it a consumer hands a key's
   * run over one event at a time.
   */
  processInOrder?(events: readonly OutboxEvent[]): Promise<InboxOutcome>[];
  /**
   * Records an event dead without running its handler (see
   * `Inbox.recordDead`); optional: consumers that give up on a message
   * unhandled call it before they dead-letter the message. True when the
   * inbox keeps the event (dead, or processed already).
   */
  recordDead?(event: OutboxEvent, reason: string): Promise<boolean>;
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
    super(`handler of batch item ${index} failed: ${thrownText(cause)}`, { cause });
  }
}
