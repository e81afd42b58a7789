/**
 * WalClaimTargets (pure bookkeeping of the WAL mode's claims by seq): a row a
 * claim by seq misses is kept and looked for again, with a growing delay (2 to 512 ms),
 * before the ordinary claims are left to decide it. The real case (a commit
 * announced before it is visible) runs in test/e2e/wal-invisible-commit.test.ts.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { WalClaimTargets } from '../../src/stores/postgres/postgres-wal-targets.ts';

const leases = [{ bucket: 1, token: 't' }];

function seenTargets(): WalClaimTargets {
  const t = new WalClaimTargets(60_000);
  assert.deepEqual(t.plan(leases, 0), { kind: 'full' });
  t.afterFull(leases, [], 500, 0);
  return t;
}

it('keeps a missed row announced: looks after 1 ms, the ordinary claim at the second miss, then looks after 2, 4, ... ms', () => {
  const t = seenTargets();
  t.announce([1], [5]);
  let plan = t.plan(leases, 1);
  assert.deepEqual(plan, { kind: 'seqs', seqs: [5], buckets: [1] });
  assert.equal(t.afterSeqs(leases, plan as { seqs: number[]; buckets: number[] }, [], 500, 1), false, 'first miss: asked again, no ordinary claim yet');
  assert.equal(t.lookInMs([1], 1), 1, 'looked for again 1 ms later');
  plan = t.plan(leases, 2);
  assert.deepEqual(plan, { kind: 'seqs', seqs: [5], buckets: [1] });
  assert.equal(t.afterSeqs(leases, plan as { seqs: number[]; buckets: number[] }, [], 500, 2), true, 'second miss: the ordinary claim next');
  assert.equal(t.lookInMs([1], 2), 2);
  assert.deepEqual(t.plan(leases, 3), { kind: 'full' });
  t.afterFull(leases, [], 500, 3); // the ordinary claim does not see it either (not visible yet)
  let now = 4;
  for (let miss = 3; miss <= 10; miss++) {
    plan = t.plan(leases, now);
    assert.deepEqual(plan, { kind: 'seqs', seqs: [5], buckets: [1] }, `still asked for at miss ${miss}`);
    assert.equal(t.afterSeqs(leases, plan as { seqs: number[]; buckets: number[] }, [], 500, now), false);
    assert.equal(t.lookInMs([1], now), 2 ** (miss - 1));
    now += 2 ** (miss - 1);
  }
  plan = t.plan(leases, now);
  assert.deepEqual(plan, { kind: 'seqs', seqs: [5], buckets: [1] });
  t.afterSeqs(leases, plan as { seqs: number[]; buckets: number[] }, [], 500, now);
  assert.deepEqual(t.plan(leases, now + 1), { kind: 'none' }, 'given up to the ordinary claims at the 11th miss');
  assert.equal(t.lookInMs([1], now + 1), Number.POSITIVE_INFINITY);
});

it('a missed row that turns up ends the looks; other buckets are not woken for it', () => {
  const t = seenTargets();
  t.announce([1, 1], [5, 6]);
  let plan = t.plan(leases, 0) as { seqs: number[]; buckets: number[] };
  assert.equal(t.afterSeqs(leases, plan, [{ seq: 6, bucket: 1 }], 500, 0), false);
  plan = t.plan(leases, 1) as { seqs: number[]; buckets: number[] };
  assert.deepEqual(plan.seqs, [5]);
  t.afterSeqs(leases, plan, [], 500, 1);
  assert.equal(t.lookInMs([2], 1), Number.POSITIVE_INFINITY);
  assert.equal(t.lookInMs([1, 2], 1), 2);
  plan = t.plan(leases, 3) as unknown as { seqs: number[]; buckets: number[] };
  assert.deepEqual(plan, { kind: 'full' });
  t.afterFull(leases, [{ seq: 5, bucket: 1 }], 500, 3);
  assert.deepEqual(t.plan(leases, 4), { kind: 'none' });
  assert.equal(t.lookInMs([1], 4), Number.POSITIVE_INFINITY);
});

it('every retry or deferral recorded wakes the lanes when it comes due, not only the earliest', () => {
  const t = seenTargets();
  t.dueAt(100); // one event's retry
  t.dueAt(5000); // another key's, later
  t.dueAt(3000);
  assert.equal(t.dueInMs(50), 50);
  assert.deepEqual(t.plan(leases, 100), { kind: 'full' }, 'the first due: the ordinary claim');
  t.afterFull(leases, [], 500, 100);
  assert.equal(t.dueInMs(100), 2900, 'the next one still wakes the lane');
  assert.deepEqual(t.plan(leases, 200), { kind: 'none' }, 'nothing due in between');
  assert.deepEqual(t.plan(leases, 3000), { kind: 'full' });
  t.afterFull(leases, [], 500, 3000);
  assert.equal(t.dueInMs(3000), 2000);
  assert.deepEqual(t.plan(leases, 5001), { kind: 'full' });
  t.afterFull(leases, [], 500, 5001);
  assert.equal(t.dueInMs(5001), Number.POSITIVE_INFINITY);
});

it('a row claimed before its commit was announced is not asked for by seq when the announcement comes, however many unannounced rows other lanes claimed before', () => {
  const a = [{ bucket: 0, token: 'a' }];
  const b = [{ bucket: 1, token: 'b' }];
  const t = new WalClaimTargets(60_000);
  const drainB = (from: number, batches: number): void => {
    for (let i = 0; i < batches; i++) {
      t.plan(b, 1);
      t.afterFull(b, Array.from({ length: 1000 }, (_, j) => ({ seq: from + i * 1000 + j, bucket: 1 })), 1001, 1);
    }
  };
  // Lane B drains rows the stream never announces (committed before it started): 8,000 of them.
  drainB(100_000, 8);
  // Lane A's ordinary claim returns seq 5 before the stream announced its commit; its batch is then published and marked.
  assert.deepEqual(t.plan(a, 1), { kind: 'full' });
  t.afterFull(a, [{ seq: 5, bucket: 0 }], 500, 1);
  drainB(200_000, 1); // lane B goes on meanwhile
  t.announce([0], [5]);
  // While lane A's batch is marked, seq 5 is still pending: a claim by seq for it would publish it again.
  assert.deepEqual(t.plan(a, 2), { kind: 'none' });
});
