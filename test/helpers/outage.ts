/**
 * A consumer started while its broker does not answer keeps trying
 * (docs/operations.md, "Broker down at start"): this starts one, waits for
 * its first failed attempt (an `error` event, operation `start`), stops it,
 * checks that start() then rejects with AbortedError, and returns the
 * attempt's message (which names the setting to check).
 */
import assert from 'node:assert/strict';
import type { OutboxEvent } from 'txbox';
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

/**
 * An inbox whose database connections all go silent (a proxy that stops
 * forwarding on every open one): `warm` is processed first (it opens the
 * pool's connections), then the proxy is silenced and `fresh` processed,
 * retrying an outage in place as a consumer does. Returns how long `fresh`
 * took once the connections went silent.
 */
export async function processAfterSilence(
  proxy: { silence(): void },
  inbox: { process(event: OutboxEvent): Promise<{ readonly status: string }> },
  warm: readonly OutboxEvent[],
  fresh: OutboxEvent,
): Promise<number> {
  await Promise.all(warm.map((e) => inbox.process(e)));
  proxy.silence();
  const started = performance.now();
  let status: string | undefined;
  for (let i = 0; i < 20 && status !== 'processed'; i++) status = (await inbox.process(fresh).catch(() => undefined))?.status;
  assert.equal(status, 'processed');
  return performance.now() - started;
}
