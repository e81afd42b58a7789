/**
 * A consumer started while its broker does not answer keeps trying
 * (docs/operations.md, "Broker down at start"): this starts one, waits for
 * its first failed attempt (an `error` event, operation `start`), stops it,
 * checks that start() then rejects with AbortedError, and returns the
 * attempt's message (which names the setting to check).
 */
import assert from 'node:assert/strict';
import { waitFor } from './wait.ts';

interface WaitingConsumer {
  start(): Promise<void>;
  stop(): Promise<void>;
  readonly events: { on(name: 'error', listener: (e: { readonly operation: string; readonly message: string }) => void): unknown };
}

export async function startWhileUnreachable(consumer: WaitingConsumer, timeoutMs = 30_000): Promise<string> {
  const attempts: string[] = [];
  consumer.events.on('error', (e) => {
    if (e.operation === 'start') attempts.push(e.message);
  });
  const state: { outcome: unknown } = { outcome: 'pending' };
  const started = consumer.start().then(
    () => (state.outcome = 'started'),
    (err: unknown) => (state.outcome = err),
  );
  await waitFor('a failed start attempt', () => attempts.length > 0 || state.outcome !== 'pending', timeoutMs, 50);
  assert.equal(state.outcome, 'pending', `start() keeps trying while the broker does not answer, got ${String(state.outcome)}`);
  await consumer.stop();
  await started;
  const outcome: unknown = state.outcome;
  assert.ok(outcome instanceof Error && (outcome as Error & { code?: string }).code === 'TXBOX_ABORTED', `stop() ends the wait: ${String(outcome)}`);
  return attempts[0]!;
}
