/**
 * `untilAborted` with a signal that is already aborted rejects at once; the
 * promise it was given may still reject later (a transport called with an
 * aborted signal rejects with its reason). That rejection must be handled:
 * left alone it is an unhandled rejection, which ends a Node process (a relay
 * whose publish started just after its lease's local deadline).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { untilAborted } from '../../src/core/abort.ts';

async function unhandledDuring(fn: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    seen.push(reason);
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    await fn();
    await tick();
    await tick();
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  return seen;
}

it('a signal aborted before the call: rejects with its reason, and the promise rejecting afterwards is handled', async () => {
  const controller = new AbortController();
  const reason = new Error('the lease of the batch ended locally');
  controller.abort(reason);
  const seen = await unhandledDuring(async () => {
    let rejectLater!: (e: Error) => void;
    const publish = new Promise<never>((_, reject) => (rejectLater = reject));
    await assert.rejects(untilAborted(publish, controller.signal), reason);
    rejectLater(new Error('publish rejected with the signal'));
  });
  assert.deepEqual(seen, []);
});

it('a promise that already rejected, given with an aborted signal, is handled too', async () => {
  const controller = new AbortController();
  controller.abort(new Error('stop'));
  const seen = await unhandledDuring(async () => {
    const publish = Promise.reject(new Error('rejected at once'));
    await assert.rejects(untilAborted(publish, controller.signal), /stop/);
  });
  assert.deepEqual(seen, []);
});

it('a signal aborted during the call: rejects with its reason, the promise rejecting afterwards is handled', async () => {
  const controller = new AbortController();
  const seen = await unhandledDuring(async () => {
    let rejectLater!: (e: Error) => void;
    const publish = new Promise<never>((_, reject) => (rejectLater = reject));
    const raced = untilAborted(publish, controller.signal);
    controller.abort(new Error('timeout'));
    await assert.rejects(raced, /timeout/);
    rejectLater(new Error('late'));
  });
  assert.deepEqual(seen, []);
});
