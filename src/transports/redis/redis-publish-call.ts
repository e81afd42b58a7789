/**
 * One `publish()` call of the Redis transport: every event of the call is
 * checked, then sent as one XADD in a single pipeline (one round trip, no
 * MULTI: each XADD succeeds or fails on its own). One timer bounds the call,
 * and the caller's signal cancels the wait.
 */
import type { Redis } from 'ioredis';
import type { OutboxEvent } from '../../core/envelope.ts';
import { TransportError } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { ACK, abortedFailure, timeoutFailure, xaddFailure, type XaddTarget } from './redis-outcomes.ts';
import { encodeStreamFields, entryBytes } from './redis-stream-fields.ts';
import type { ResolvedRedisTransportOptions } from './redis-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

export interface PublishContext {
  readonly client: Redis;
  readonly options: ResolvedRedisTransportOptions;
  readonly address: string;
  /** destination -> stream key, memoized by the transport. */
  streamKey(destination: string): string;
  /** The call got no reply in time: the transport's own client drops its connection for a new one. */
  readonly onTimeout?: (() => void) | undefined;
}

type Settled = { readonly kind: 'replies'; readonly replies: [Error | null, unknown][] | null } | { readonly kind: 'failed'; readonly err: unknown } | { readonly kind: 'timeout' } | { readonly kind: 'aborted' };

export async function publishCall(ctx: PublishContext, events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
  const outcomes = new Array<PublishOutcome>(events.length);
  const targets = events.map((e): XaddTarget => ({ stream: ctx.streamKey(e.destination), destination: e.destination, address: ctx.address }));
  if (signal.aborted) return targets.map((t) => ({ ok: false, error: abortedFailure(t) }));
  const o = ctx.options;
  const trim = o.maxLen === null ? [] : ['MAXLEN', '~', String(o.maxLen)];
  const pipeline = ctx.client.pipeline();
  const sent: number[] = [];
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    const target = targets[i]!;
    let fields: string[];
    try {
      fields = encodeStreamFields(event);
    } catch (err) {
      const why = thrownText(err);
      outcomes[i] = { ok: false, error: new TransportError('permanent', `event ${event.id} for stream ${JSON.stringify(target.stream)}: its payload or headers cannot be serialized to JSON (${why})`) };
      continue;
    }
    // A UTF-16 code unit is at most 3 UTF-8 bytes: count exactly only when the entry might be too large.
    const bytes = charCount(fields) * 3 <= o.maxMessageBytes ? 0 : entryBytes(fields);
    if (bytes > o.maxMessageBytes) {
      const message = `event ${event.id} for stream ${JSON.stringify(target.stream)} is ${bytes} bytes, over maxMessageBytes (${o.maxMessageBytes}); store large data elsewhere and put a reference in the event, or raise maxMessageBytes`;
      outcomes[i] = { ok: false, error: new TransportError('permanent', message) };
      continue;
    }
    pipeline.xadd(target.stream, ...trim, '*', ...fields);
    sent.push(i);
  }
  if (sent.length === 0) return outcomes;

  let settled = await settleWithin(pipeline.exec(), o.commandTimeoutMs, signal);
  // ioredis's own commandTimeout (the same bound) usually comes first, as each command's error: the same silence.
  if (settled.kind === 'failed' && isCommandTimeout(settled.err)) settled = { kind: 'timeout' };
  if (settled.kind === 'replies' && settled.replies?.some(([err]) => isCommandTimeout(err))) settled = { kind: 'timeout' };
  if (settled.kind === 'timeout') ctx.onTimeout?.();
  for (let n = 0; n < sent.length; n++) {
    const i = sent[n]!;
    const target = targets[i]!;
    outcomes[i] = outcomeOf(settled, n, target, o.commandTimeoutMs);
  }
  return outcomes;
}

function isCommandTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === 'Command timed out';
}

function charCount(fields: readonly string[]): number {
  let n = 0;
  for (const f of fields) n += f.length;
  return n;
}

function outcomeOf(settled: Settled, n: number, target: XaddTarget, timeoutMs: number): PublishOutcome {
  switch (settled.kind) {
    case 'timeout':
      return { ok: false, error: timeoutFailure(target, timeoutMs) };
    case 'aborted':
      return { ok: false, error: abortedFailure(target) };
    case 'failed':
      return { ok: false, error: xaddFailure(settled.err, target) };
    case 'replies': {
      const reply = settled.replies?.[n];
      if (reply === undefined) return { ok: false, error: xaddFailure(new Error('the pipeline returned no reply for this command'), target) };
      const [err, id] = reply;
      if (err) return { ok: false, error: xaddFailure(err, target) };
      // XADD answers the new entry's id; nil only with NOMKSTREAM, which is not used.
      return typeof id === 'string' ? ACK : { ok: false, error: xaddFailure(new Error(`unexpected XADD reply ${JSON.stringify(id)}`), target) };
    }
  }
}

/** The pipeline's replies, or why we stopped waiting. A late result is dropped (its rejection handled). */
function settleWithin(exec: Promise<[Error | null, unknown][] | null>, timeoutMs: number, signal: AbortSignal): Promise<Settled> {
  return new Promise<Settled>((resolve) => {
    const finish = (s: Settled): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(s);
    };
    const onAbort = (): void => finish({ kind: 'aborted' });
    const timer = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs);
    signal.addEventListener('abort', onAbort, { once: true });
    exec.then(
      (replies) => finish({ kind: 'replies', replies }),
      (err: unknown) => finish({ kind: 'failed', err }),
    );
  });
}
