/**
 * The relay store takes a completion's delay as given: a retry or deferral
 * whose delayMs is not a whole number (a custom transport's Retry-After in
 * fractional milliseconds) was refused by the statement's integer cast, and
 * the relay's isolation then parked the event after one retriable failure.
 * On PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });

for (const kind of BACKENDS) {
  describe(`relay store delays on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
    });
    after(async () => {
      await db.close();
    });

    it('a retry of 1500.5 ms is recorded (pending, one attempt), not refused', async () => {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [E] });
      await db.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: 'a', payload: { n: 1 } })));
      const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
      await store.heartbeat({ relayId: 'r', host: 'test', pid: process.pid, inFlight: 0, publishedTotal: 0, ratePerMinute: 0 }, 10_000);
      const leases = await store.lease('r', [], 256, 10_000);
      const [event] = await store.claim(leases, { limit: 10, skipParkedDestinations: [] });
      const token = leases.find((l) => l.bucket === event!.bucket)!.token;
      const r = await store.complete('r', [{ seq: event!.seq, token, outcome: 'retry', delayMs: 1500.5, error: 'HTTP 503' }]);
      assert.deepEqual(r, { applied: 1, rejected: 0 });
      const rows = await db.query<{ state: string; attempts: number }>(`SELECT state, attempts FROM "${db.schema}".outbox`);
      assert.deepEqual(rows.map((x) => [x.state, Number(x.attempts)]), [['pending', 1]]);
    });
  });
}
