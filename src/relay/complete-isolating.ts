import { setTimeout as sleep } from 'node:timers/promises';
import { scrubErrorText } from '../core/error-text.ts';
import { untilAborted } from '../core/abort.ts';
import { classifyStoreError, mysqlErrno } from '../core/store-errors.ts';
import type { Completion, RelayStore } from '../core/ports.ts';

/** SQLSTATE classes of errors that the same statement with the same input meets again: retrying does not help. */
const DETERMINISTIC_CLASSES = new Set(['0A', '22', '23', '2F', '38', '39', '42', '54', 'P0']);

/** MySQL's errno for a SIGNAL raised by a trigger or procedure (SQLSTATE 45000 and the like). */
const ER_SIGNAL_EXCEPTION = 1644;

/**
 * True for a store error that the same input will meet again (a data
 * exception, a constraint, a trigger's RAISE ...: a PostgreSQL SQLSTATE of
 * those classes; on MySQL / MariaDB the data errors `classifyStoreError`
 * knows by errno, and a trigger's SIGNAL). Connection losses, timeouts, lock and serialization
 * failures and errors without a SQLSTATE are not: they are retried as a whole.
 */
export function isDeterministicStoreError(err: unknown): boolean {
  // MySQL / MariaDB: mysql2 puts its ER_* name in `code`; the server's errno tells (a trigger's SIGNAL is 1644).
  const errno = mysqlErrno(err);
  if (errno !== 0) return errno === ER_SIGNAL_EXCEPTION || classifyStoreError(err) === 'deterministic';
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && DETERMINISTIC_CLASSES.has(code.slice(0, 2));
}

export interface CompleteResult {
  readonly applied: number;
  readonly rejected: number;
  /** The completions the store took (culprits replaced by their `park`), for counting. */
  readonly completed: readonly Completion[];
  /** Completions replaced by a `park` because the store refused them as they were. */
  readonly isolated: readonly (Completion & { outcome: 'park' })[];
  /** Completions left unmarked (their events stay pending and are published again). */
  readonly unmarked: number;
}

export interface CompleteContext {
  readonly store: RelayStore;
  readonly relayId: string;
  readonly signal: AbortSignal;
  /** Attempts of the whole batch on errors that are not deterministic. Default 5. */
  readonly attempts?: number;
  onError(err: Error): void;
}

/**
 * Marks a batch with the store's `complete`. Transient failures are retried
 * with backoff, then given up (the events stay pending: at-least-once). A
 * deterministic failure is isolated: the batch is bisected, every part the
 * store accepts is marked, and a single completion it still refuses is
 * replaced by a `park` with a plain error saying why (or, if even that is
 * refused, a fixed text). So one bad completion costs O(log n) statements and
 * never makes the relay publish the rest of its batch again. When the
 * store refuses the fixed-text park too, the fault is not that completion's:
 * isolation stops and the rest stays pending.
 */
export async function completeIsolating(completions: readonly Completion[], ctx: CompleteContext): Promise<CompleteResult> {
  const result = { applied: 0, rejected: 0, completed: [] as Completion[], isolated: [] as (Completion & { outcome: 'park' })[], unmarked: 0 };
  const attempts = ctx.attempts ?? 5;
  let error: unknown;
  for (let attempt = 1; ; attempt++) {
    error = await tryComplete(completions, ctx, result);
    if (error === undefined) return result;
    if (isDeterministicStoreError(error)) break;
    if (attempt >= attempts || ctx.signal.aborted) {
      result.unmarked += completions.length;
      return result;
    }
    await sleep(200 * 2 ** attempt, undefined, { signal: ctx.signal }).catch(() => {});
  }
  let stop = false;
  const bisect = async (part: readonly Completion[], err: unknown): Promise<void> => {
    if (stop || ctx.signal.aborted) {
      result.unmarked += part.length;
      return;
    }
    if (part.length === 1) {
      if (!(await isolate(part[0]!, err, ctx, result))) stop = true;
      return;
    }
    const mid = Math.ceil(part.length / 2);
    for (const half of [part.slice(0, mid), part.slice(mid)]) {
      const e = stop ? undefined : await tryComplete(half, ctx, result);
      if (stop) result.unmarked += half.length;
      else if (e === undefined) continue;
      else if (isDeterministicStoreError(e)) await bisect(half, e);
      else result.unmarked += half.length; // transient now: leave this part pending
    }
  };
  await bisect(completions, error);
  return result;
}

async function tryComplete(part: readonly Completion[], ctx: CompleteContext, result: { applied: number; rejected: number; completed: Completion[] }): Promise<unknown> {
  try {
    // At stop, past stopTimeoutMs, a mark the database does not answer is not waited for (its events are
    // published again by whoever holds their buckets next: at-least-once); closing the store waits for it, bounded.
    const { applied, rejected } = await untilAborted(ctx.store.complete(ctx.relayId, part), ctx.signal);
    result.applied += applied;
    result.rejected += rejected;
    result.completed.push(...part);
    return undefined;
  } catch (err) {
    if (!ctx.signal.aborted) ctx.onError(err as Error);
    return err;
  }
}

/** Replaces a refused completion by a park saying why. False when the store refuses that too. */
async function isolate(
  c: Completion,
  err: unknown,
  ctx: CompleteContext,
  result: { applied: number; rejected: number; completed: Completion[]; isolated: Completion[]; unmarked: number },
): Promise<boolean> {
  const reason = scrubErrorText((err as Error)?.message ?? String(err), 500);
  const first =
    c.outcome === 'published'
      ? `acked by the transport but could not be marked published: ${reason}`
      : `could not be marked ${c.outcome === 'retry' ? 'for retry' : 'parked'}: ${reason}; the publish error was: ${c.error}`;
  const routesAcked = c.outcome === 'published' ? [] : (c.routesAcked ?? []);
  for (const text of [scrubErrorText(first), 'could not be marked; the relay reported the database error (phase complete)']) {
    const park = { seq: c.seq, token: c.token, outcome: 'park' as const, error: text, routesAcked };
    if ((await tryComplete([park], ctx, result)) === undefined) {
      result.isolated.push(park);
      return true;
    }
  }
  result.unmarked++;
  return false;
}
