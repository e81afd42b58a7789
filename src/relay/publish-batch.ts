import type { StoredEvent } from '../core/envelope.ts';
import { TransportError, toTransportError } from '../core/errors.ts';
import type { Completion, PublishOutcome, Transport } from '../core/ports.ts';
import { retryDelay, type ResolvedRetryOptions } from '../core/retry.ts';
import { publishToRoutes, type ResolvedRoute, type RoutedOutcome } from './routes.ts';
import { untilAborted } from '../core/abort.ts';
import type { DestinationBreakers } from './destination-breaker.ts';
import { CallSignal } from './call-signal.ts';
import { scrubErrorText } from '../core/error-text.ts';
import { startPublishTrace } from './relay-tracing.ts';

export interface BatchContext {
  readonly routes: readonly ResolvedRoute[];
  readonly retry: ResolvedRetryOptions;
  readonly publishTimeoutMs: number;
  /** Aborted when the relay must stop now. */
  readonly signal: AbortSignal;
  /** The fencing token of each event's bucket, from the claim. */
  tokenOf(bucket: number): string;
  /** False once the relay may no longer act on the bucket (lease lost or about to expire). */
  leaseValid(bucket: number, token: string): boolean;
  /** The local deadline (performance.now() clock) of the bucket's lease under `token`; -Infinity when not held. */
  leaseDeadline(bucket: number, token: string): number;
  onFailure?(event: StoredEvent, completion: Completion & { outcome: 'retry' | 'park' }): void;
  /** Per-destination circuit breakers: events of a down destination are deferred, not attempted. Without it, destination-down counts as retriable. */
  readonly breakers?: DestinationBreakers;
  /** `left` events of the batch stay pending, unsent or unacked, because their lease ended locally. */
  onLeaseEnded?(left: number): void;
  /** One transport call ended after `seconds` with `outcomes` (for metrics). */
  onCall?(transport: Transport, events: readonly StoredEvent[], outcomes: readonly PublishOutcome[], seconds: number): void;
}

/**
 * Publishes a claimed batch in waves: each wave holds the next event of every
 * key still in play, so one transport call carries many keys at once while
 * a key's events go out strictly one after another. A key stops at its first
 * failure: later events of that key are left pending, to go after the retry.
 * Returns completions for every event that was attempted; events not
 * attempted (key stopped, lease lost, relay stopping) stay pending.
 */
export async function publishBatch(events: readonly StoredEvent[], ctx: BatchContext): Promise<Completion[]> {
  const queues = new Map<string, StoredEvent[]>();
  for (const e of events) {
    const q = queues.get(e.key);
    if (q) q.push(e);
    else queues.set(e.key, [e]);
  }
  const completions: Completion[] = [];
  const { breakers } = ctx;
  while (queues.size > 0 && !ctx.signal.aborted) {
    const wave: StoredEvent[] = [];
    const probes = new Set<StoredEvent>();
    for (const [key, q] of queues) {
      const head = q[0]!;
      if (!ctx.leaseValid(head.bucket, ctx.tokenOf(head.bucket))) {
        ctx.onLeaseEnded?.(q.length);
        queues.delete(key);
        continue;
      }
      const admission = breakers?.admit(head.destination) ?? 'send';
      if (admission === 'hold') {
        // Its destination is down: pending again after the pause, attempts unchanged; the key waits behind it.
        completions.push(deferCompletion(head, ctx.tokenOf(head.bucket), breakers!, `destination-down: the circuit of destination ${JSON.stringify(head.destination)} is open; held, not sent`, []));
        queues.delete(key);
        continue;
      }
      if (admission === 'probe') probes.add(head);
      wave.push(head);
    }
    if (wave.length === 0) break;
    const outcomes = await publishWave(wave, ctx);
    if (outcomes === null) {
      for (const p of probes) breakers!.probeEnded(p.destination);
      break; // stopping: leave the wave pending
    }
    for (let i = 0; i < wave.length; i++) {
      const event = wave[i]!;
      const outcome = outcomes[i]!;
      const token = ctx.tokenOf(event.bucket);
      const q = queues.get(event.key)!;
      if (outcome.ok) {
        breakers?.up(event.destination);
        completions.push({ seq: event.seq, token, bucket: event.bucket, outcome: 'published' });
        q.shift();
        if (q.length === 0) queues.delete(event.key);
        continue;
      }
      if (!ctx.leaseValid(event.bucket, token)) {
        // The lease ended locally during the call (which was aborted at its deadline):
        // not an attempt of this event. It stays pending for whoever holds the bucket next.
        if (probes.has(event)) breakers!.probeEnded(event.destination);
        ctx.onLeaseEnded?.(q.length);
        queues.delete(event.key);
        continue;
      }
      if (endedByLease(outcome.error)) {
        // The call was aborted at another bucket's lease deadline, not on this event's account: not an
        // attempt. Pending again at once, attempts unchanged (the transport may have sent it: at-least-once).
        if (probes.has(event)) breakers!.probeEnded(event.destination);
        completions.push({ seq: event.seq, token, bucket: event.bucket, outcome: 'defer', delayMs: 0, error: 'publish aborted: another bucket of the same transport call ended its lease locally; not an attempt', routesAcked: outcome.acked });
        queues.delete(event.key);
        continue;
      }
      if (breakers && outcome.error!.kind === 'destination-down') {
        const reason = `destination-down: ${outcome.error!.message}`.slice(0, 2000);
        breakers.down(event.destination, reason, probes.has(event));
        completions.push(deferCompletion(event, token, breakers, reason, outcome.acked));
        queues.delete(event.key);
        continue;
      }
      if (probes.has(event)) breakers!.probeEnded(event.destination);
      const failure = failureCompletion(event, token, outcome.error!, ctx.retry, outcome.acked);
      completions.push(failure);
      ctx.onFailure?.(event, failure);
      queues.delete(event.key); // the rest of this key waits for the retry
    }
  }
  return completions;
}

/** A call aborted at the local lease deadline of (one of) its events' buckets. */
class LeaseEndedError extends TransportError {}

/** Whether the error (or one it wraps, as a route's prefix does) is a call aborted at a lease deadline. */
function endedByLease(error: TransportError | undefined): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) if (e instanceof LeaseEndedError) return true;
  return false;
}

async function publishWave(wave: StoredEvent[], ctx: BatchContext): Promise<RoutedOutcome[] | null> {
  const outcomes = await publishToRoutes(wave, ctx.routes, (transport, events) => callTransport(transport, events, ctx));
  return ctx.signal.aborted ? null : outcomes;
}

/**
 * One transport call, aborted at the publish timeout or at the local lease deadline of
 * its buckets, whichever comes first; failures of the whole call become per-event outcomes.
 */
async function callTransport(transport: Transport, events: StoredEvent[], ctx: BatchContext): Promise<PublishOutcome[]> {
  const call = new CallSignal(ctx.signal, ctx.publishTimeoutMs, () => {
    let deadline = Infinity;
    for (const e of events) deadline = Math.min(deadline, ctx.leaseDeadline(e.bucket, ctx.tokenOf(e.bucket)));
    return deadline;
  });
  const signal = call.signal;
  const trace = startPublishTrace(transport, events);
  const started = performance.now();
  let outcomes: PublishOutcome[] | undefined;
  try {
    outcomes = await untilAborted(trace ? trace.run(() => transport.publish(trace.events, signal)) : transport.publish(events, signal), signal);
    if (outcomes.length !== events.length) {
      throw new Error(`transport ${transport.name} returned ${outcomes.length} outcomes for ${events.length} events`);
    }
    trace?.end(outcomes);
    return outcomes;
  } catch (err) {
    // No outcome at all for the whole call within publishTimeoutMs: the destination is not answering
    // (transports bound a slow single send below that, e.g. HTTP's timeoutMs). Destination-down: the
    // relay pauses it and probes, so that a silence of any length spends no attempts and parks nothing.
    const error =
      call.cause === 'timeout'
        ? new TransportError('destination-down', `publish timed out after ${ctx.publishTimeoutMs} ms: the destination is not answering`, { cause: err })
        : call.cause === 'lease'
          ? new LeaseEndedError('retriable', 'publish aborted: the lease of its bucket ended locally before the ack', { cause: err })
          : toTransportError(err);
    outcomes = events.map(() => ({ ok: false, error }));
    trace?.end(outcomes);
    return outcomes;
  } finally {
    call.dispose();
    if (outcomes) ctx.onCall?.(transport, events, outcomes, (performance.now() - started) / 1000);
  }
}

function deferCompletion(event: StoredEvent, token: string, breakers: DestinationBreakers, error: string, routesAcked: readonly string[]): Completion {
  return { seq: event.seq, token, bucket: event.bucket, outcome: 'defer', delayMs: breakers.holdMs(event.destination), error, routesAcked };
}

function failureCompletion(
  event: StoredEvent,
  token: string,
  error: TransportError,
  retry: ResolvedRetryOptions,
  routesAcked: readonly string[],
): Completion & { outcome: 'retry' | 'park' } {
  const attempt = event.attempts + 1;
  const message = `${error.kind}: ${error.message}`;
  const base = { seq: event.seq, token, bucket: event.bucket, routesAcked };
  if (error.kind === 'permanent') return { ...base, outcome: 'park', error: scrubErrorText(message) };
  if (attempt >= retry.maxAttempts) {
    return { ...base, outcome: 'park', error: scrubErrorText(`gave up after ${attempt} attempts; last error ${message}`) };
  }
  return { ...base, outcome: 'retry', delayMs: retryDelay(retry, attempt, error.retryAfterMs), error: scrubErrorText(message) };
}

