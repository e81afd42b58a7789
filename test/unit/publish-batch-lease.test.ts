/**
 * One transport call can carry events of several buckets, and it is aborted
 * at the earliest local lease deadline among them. An event whose own lease
 * still holds was not attempted on its own account: it must not be counted
 * as an attempt (nor parked at maxAttempts); it is deferred with its attempts
 * unchanged, pending again at once. The event whose lease ended gets no
 * completion (it stays pending for the bucket's next holder).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { publishBatch } from '../../src/relay/publish-batch.ts';
import type { StoredEvent } from '../../src/core/envelope.ts';
import type { Transport } from '../../src/core/ports.ts';

function event(seq: number, key: string, bucket: number, attempts: number): StoredEvent {
  return { id: `00000000-0000-7000-8000-00000000000${seq}`, type: 'T', aggregateType: 'A', aggregateId: key, key, destination: 'd', payload: {}, headers: {}, occurredAt: new Date(), version: null, seq, bucket, attempts, routesDone: [] };
}

it("a call aborted at another bucket's lease deadline is not an attempt of the events whose lease holds", async () => {
  const t0 = performance.now();
  const deadlines = new Map([
    [1, t0 + 50], // bucket 1's lease ends during the call
    [2, t0 + 60_000],
  ]);
  const transport: Transport = {
    name: 'slow',
    async publish(events) {
      await new Promise((r) => setTimeout(r, 200));
      return events.map(() => ({ ok: true as const }));
    },
    async close() {},
  };
  let leftByLease = 0;
  const completions = await publishBatch([event(1, 'k1', 1, 0), event(2, 'k2', 2, 4)], {
    routes: [{ name: 'default', transport, destinations: null, types: null }],
    retry: { baseDelayMs: 100, maxDelayMs: 1000, maxAttempts: 5 },
    publishTimeoutMs: 5000,
    signal: new AbortController().signal,
    tokenOf: (b) => `${b}`,
    leaseValid: (b) => performance.now() < deadlines.get(b)!,
    leaseDeadline: (b) => deadlines.get(b)!,
    onLeaseEnded: (left) => (leftByLease += left),
  });
  assert.equal(completions.find((c) => c.seq === 1), undefined, "bucket 1's event: no completion, pending for the bucket's next holder");
  assert.equal(leftByLease, 1);
  const c2 = completions.find((c) => c.seq === 2);
  assert.equal(c2?.outcome, 'defer', `bucket 2's event: deferred, not attempted (got ${JSON.stringify(c2)})`);
  assert.equal(c2.outcome === 'defer' && c2.delayMs, 0);
});
