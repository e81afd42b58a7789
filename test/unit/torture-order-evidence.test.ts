/**
 * What `txbox torture` prints for a per-key order violation: which arrival
 * broke the order, both outbox rows, each event's arrivals with the relay
 * that sent them, and the bucket's lease history (owner, token) around them.
 * The database is a stub answering the two queries: pure.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PostgresConnection } from '../../src/stores/postgres/postgres-connection.ts';
import { LeaseHistory, describeViolations, orderViolationSamples } from '../../src/cli/torture/order-evidence.ts';

const A = '00000000-0000-7000-8000-00000000000a';
const B = '00000000-0000-7000-8000-00000000000b';
const C = '00000000-0000-7000-8000-00000000000c';

function stubDb(owners: () => { owner: string; token: string }): PostgresConnection {
  return {
    query: async (text: string) => {
      if (text.includes('outbox_buckets')) return { rows: [{ bucket: 7, ...owners() }], rowCount: 1 };
      return {
        rows: [
          { id: A, seq: '10', version: '1', bucket: 7, attempts: 1, created_at: new Date(0), done_at: new Date(1000) },
          { id: B, seq: '11', version: '2', bucket: 7, attempts: 2, created_at: new Date(0), done_at: new Date(2000) },
        ],
        rowCount: 2,
      };
    },
  } as unknown as PostgresConnection;
}

it('finds first deliveries out of order, ignoring re-deliveries of earlier events', () => {
  const committed = new Map([['k1', [A, B, C]]]);
  const t = performance.now();
  const clean = [A, B, A, C, B].map((id) => ({ id, key: 'k1', at: t }));
  assert.deepEqual(orderViolationSamples(committed, clean), []);
  const broken = [B, A, C].map((id) => ({ id, key: 'k1', at: t }));
  // One swap counts twice, as in checkDeliveries: B came early, then A came after B.
  assert.deepEqual(orderViolationSamples(committed, broken), [
    { key: 'k1', got: B, expected: A, index: 0 },
    { key: 'k1', got: A, expected: C, index: 1 },
  ]);
});

it('prints the key, bucket, both rows, each arrival with its sender and time, and the lease owners and tokens around them', async () => {
  let owner = { owner: 'torture-x-r0', token: '41' };
  const db = stubDb(() => owner);
  const leases = new LeaseHistory(db, 's');
  leases.start(10);
  await sleep(50);
  owner = { owner: 'torture-x-r3', token: '42' };
  await sleep(50);
  const t = performance.now();
  leases.stop();
  const arrivals = [
    { id: B, key: 'k1', at: t - 5, from: 'torture-x-r0' },
    { id: A, key: 'k1', at: t, from: 'torture-x-r3' },
  ];
  const samples = orderViolationSamples(new Map([['k1', [A, B]]]), arrivals);
  const lines = (await describeViolations(db, 's', samples, arrivals, leases)).join('\n');
  assert.match(lines, /key k1 \(bucket 7\): arrival #0 was 0{8}-0000-7000-8000-00000000000b \(seq 11, version 2, attempts 2, .*\) before any delivery of .*000a \(seq 10, version 1/);
  assert.match(lines, /arrivals of 00000000…: #0 \d{4}-\d\d-\d\dT[\d:.]+Z from torture-x-r0/);
  assert.match(lines, /#1 [\dT:.Z-]+ from torture-x-r3/);
  assert.match(lines, /bucket 7 leases .*torture-x-r0 token 41; [\dT:.Z-]+ torture-x-r3 token 42/);
});
