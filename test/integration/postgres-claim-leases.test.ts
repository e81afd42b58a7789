/**
 * The PostgreSQL relay store derives a lane's bucket list, its smallint[]
 * parameter and its wait mask once per leases array (the relay passes the same
 * one until its leases change). A caller that changes its array between two
 * calls must still be served by the array's contents, not by what the store
 * derived from it before.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType, type BucketLease } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;
before(async () => {
  db = await openDb('postgres');
});
after(async () => {
  await db.close();
});

it('a leases array changed between two claims is claimed by what it holds now', async () => {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [E] });
  await db.transaction((tx) => outbox.enqueue(tx, [E({ aggregateId: 'x', payload: { n: 1 } }), E({ aggregateId: 'y', payload: { n: 2 } })]));
  const rows = await db.query<{ key: string; bucket: number }>(`SELECT key, bucket FROM "${db.schema}".outbox ORDER BY seq`);
  const bucketOf = new Map(rows.map((r) => [r.key, r.bucket]));
  assert.notEqual(bucketOf.get('A:x'), bucketOf.get('A:y'), 'the two keys hash to different buckets');
  const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
  try {
    const all = await store.lease('r', [], 256, 60_000);
    const leaseOf = (key: string): BucketLease => all.find((l) => l.bucket === bucketOf.get(key))!;
    const leases: BucketLease[] = [leaseOf('A:x')];
    const options = { limit: 10, skipParkedDestinations: [] };
    assert.deepEqual((await store.claim(leases, options)).map((e) => e.key), ['A:x']);
    leases[0] = leaseOf('A:y');
    assert.deepEqual((await store.claim(leases, options)).map((e) => e.key), ['A:y'], 'the same array, now of the other bucket');
    leases.push(leaseOf('A:x'));
    assert.deepEqual((await store.claim(leases, options)).map((e) => e.key).sort(), ['A:x', 'A:y']);
  } finally {
    await store.close();
  }
});
