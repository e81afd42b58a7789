/**
 * PubSubTransport's flow control: a call with more events than
 * `flowControl.maxOutstandingMessages` waited for room held by its own
 * earlier messages, which sat in the client's batch until
 * `batching.maxMilliseconds` (up to 60 s): no progress, then a retriable
 * failure and duplicates at every retry. A fake Pub/Sub client whose batch
 * goes out only on flush() or its timer (the emulator's timing cannot be
 * forced); pure unit.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import type { OutboxEvent } from 'txbox';
import { PubSubTransport } from '../../src/transports/pubsub/pubsub-transport.ts';

it('flushes the call\'s own batch before waiting for room, so a call larger than maxOutstandingMessages goes out at once', async () => {
  const batchMs = 60_000;
  let pending: (() => void)[] = [];
  let timer: NodeJS.Timeout | undefined;
  const flush = async (): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    const out = pending;
    pending = [];
    for (const send of out) send();
  };
  const topic = {
    exists: async () => [true],
    publishMessage: () =>
      new Promise<string>((resolve) => {
        pending.push(() => resolve('id'));
        timer ??= setTimeout(() => void flush(), batchMs);
      }),
    flush,
    resumePublishing() {},
  };
  const client = { subscription: () => ({}), topic: () => topic, getTopics: async () => [[]], close: async () => {} };
  const transport = new PubSubTransport({ client, topics: { orders: 'orders' }, flowControl: { maxOutstandingMessages: 2 }, batching: { maxMilliseconds: batchMs } } as never);
  await transport.start();
  const event = (i: number): OutboxEvent => ({ id: `0190a000-0000-7000-8000-00000000000${i}`, type: 't', aggregateType: 'A', aggregateId: String(i), key: `A:${i}`, destination: 'orders', payload: { i }, headers: {}, occurredAt: new Date(), version: null });
  const started = performance.now();
  try {
    const outcomes = await transport.publish([event(1), event(2), event(3)], AbortSignal.timeout(2000));
    assert.deepEqual(outcomes, [{ ok: true }, { ok: true }, { ok: true }]);
    assert.ok(performance.now() - started < 1000, `took ${Math.round(performance.now() - started)} ms`);
  } finally {
    clearTimeout(timer);
    await transport.close();
  }
});
