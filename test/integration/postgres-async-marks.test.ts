/**
 * The relay's marks commit asynchronously by default (`synchronousMarks:
 * false`): the complete statement sets synchronous_commit off for its own
 * transaction only. A trigger on the outbox records the setting the mark's
 * transaction ran with; the connection's next statement (a lease renewal,
 * say) must see the server's setting again. On PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, defineEvent, payloadType, type BucketLease } from 'txbox';
import { pgConnection, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { BACKENDS, DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

/** Every bucket leased to `relayId`, with its token. */
async function leaseAll(store: PostgresRelayStore, relayId: string): Promise<BucketLease[]> {
  await store.heartbeat({ relayId, host: 'test', pid: process.pid, inFlight: 0, publishedTotal: 0, ratePerMinute: 0 }, 10_000);
  return store.lease(relayId, [], 256, 10_000);
}

for (const kind of BACKENDS) {
  describe(`relay marks and synchronous_commit on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
      await db.query(`CREATE TABLE "${db.schema}".mark_probe (state text, sync text)`);
      await db.query(`CREATE FUNCTION "${db.schema}".mark_probe() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO "${db.schema}".mark_probe VALUES (NEW.state, current_setting('synchronous_commit')); RETURN NEW; END $$`);
      await db.query(`CREATE TRIGGER mark_probe AFTER UPDATE ON "${db.schema}".outbox FOR EACH ROW EXECUTE FUNCTION "${db.schema}".mark_probe()`);
    });
    after(async () => {
      await db.close();
    });

    for (const synchronousMarks of [undefined, false, true]) {
      it(`synchronousMarks ${String(synchronousMarks)}: the mark's transaction runs with synchronous_commit ${synchronousMarks ? 'on' : 'off'}, and only it`, async () => {
        await db.query(`TRUNCATE "${db.schema}".outbox, "${db.schema}".mark_probe`);
        const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
        await db.transaction((tx) => outbox.enqueue(tx, [OrderCreated({ aggregateId: 'a', payload: { n: 1 } }), OrderCreated({ aggregateId: 'b', payload: { n: 2 } })]));
        // One connection on PostgreSQL, so that the statement after the mark runs on the mark's session.
        const pool = kind === 'postgres' ? new pg.Pool({ connectionString: DATABASE_URL, max: 1 }) : undefined;
        const connection = pool ? pgConnection({ pool }) : db.connection;
        const store = new PostgresRelayStore({ schema: db.schema, connection, ...(synchronousMarks === undefined ? {} : { synchronousMarks }) });
        const relayId = `marks-${String(synchronousMarks)}`;
        let leases: BucketLease[] = [];
        try {
          leases = await leaseAll(store, relayId);
          const events = await store.claim(leases, { limit: 10, skipParkedDestinations: [] });
          assert.equal(events.length, 2);
          const token = (bucket: number): string => leases.find((l) => l.bucket === bucket)!.token;
          const r = await store.complete(relayId, [
            { seq: events[0]!.seq, token: token(events[0]!.bucket), outcome: 'published' },
            { seq: events[1]!.seq, token: token(events[1]!.bucket), outcome: 'retry', delayMs: 1000, error: 'try again' },
          ]);
          assert.deepEqual(r, { applied: 2, rejected: 0 });
          const probe = await db.query<{ state: string; sync: string }>(`SELECT state, sync FROM "${db.schema}".mark_probe ORDER BY state`);
          const expected = synchronousMarks ? 'on' : 'off';
          assert.deepEqual(probe, [{ state: 'pending', sync: expected }, { state: 'published', sync: expected }]);
          // The setting ended with the mark's transaction: the session's next statement commits synchronously again.
          const { rows } = await connection.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
          assert.equal(rows[0]!.synchronous_commit, 'on');
        } finally {
          await store.leave(relayId, leases);
          await store.close();
          if (pool) {
            await connection.close();
            await pool.end();
          }
        }
      });
    }
  });
}
