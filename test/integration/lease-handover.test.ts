/**
 * Lease hand-over between relays (issue 12 item 8), by ticking lease keepers
 * by hand against the real database: counts of buckets held, and the delay
 * the keeper asks for before its next tick. No wall-clock assertions; the
 * times are measured in bench/lease-handover.ts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PostgresRelayStore } from 'txbox/postgres';
import { LeaseKeeper } from '../../src/relay/lease-keeper.ts';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const TTL = 60_000;
const INTERVAL = TTL / 3;
const stats = { inFlight: 0, publishedTotal: 0, ratePerMinute: 0, host: 'test', pid: 1 };

for (const kind of BACKENDS) {
  describe(`lease hand-over on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
    });
    after(async () => {
      await db.close();
    });

    const reset = async (): Promise<void> => {
      await db.query(`UPDATE "${db.schema}".outbox_buckets SET owner = NULL, lease_until = NULL`);
      await db.query(`DELETE FROM "${db.schema}".outbox_relays`);
    };
    const keeper = (id: string): LeaseKeeper => new LeaseKeeper(new PostgresRelayStore({ schema: db.schema, connection: db.connection }), id, TTL);

    it('two relays started together hold a fair share after two ticks of each; the one short of it ticks at a quarter interval meanwhile', async () => {
      await reset();
      const a = keeper('a');
      const b = keeper('b');
      await a.tick(stats);
      assert.equal(a.size, 256, 'alone, a takes every bucket');
      await b.tick(stats);
      assert.equal(b.size, 0, 'nothing is free yet');
      assert.equal(b.nextTickDelayMs(INTERVAL), INTERVAL / 4, 'b, short of its share after the relay count changed, ticks again soon');
      assert.equal(a.nextTickDelayMs(INTERVAL), INTERVAL, 'a, at or over its share, keeps the regular interval');
      await a.tick(stats);
      assert.equal(a.size, 128, 'a releases its surplus');
      await b.tick(stats);
      assert.deepEqual([a.size, b.size], [128, 128]);
      assert.equal(b.nextTickDelayMs(INTERVAL), INTERVAL, 'b has its share: back to the regular interval');
    });

    it('buckets kept over the fair share because a batch was in flight are released when the batch ends', async () => {
      await reset();
      const a = keeper('a');
      const b = keeper('b');
      await a.tick(stats);
      await b.tick(stats);
      const busy = Array.from({ length: 200 }, (_, i) => i);
      a.markBusy(busy);
      await a.tick(stats);
      assert.equal(a.size, 200, 'only the 56 idle buckets of the surplus were released');
      // Not while a tick runs: the tick may be renewing those buckets. It releases them itself.
      const ticking = a.tick(stats);
      a.markIdle(busy.slice(0, 50));
      assert.equal(a.size, 200, 'nothing released by markIdle during a tick');
      await ticking;
      assert.equal(a.size, 150, 'the tick released the 50 idle buckets of the surplus');
      a.markIdle(busy.slice(50, 60));
      assert.equal(a.size, 140, 'each bucket over the share is released as its batch ends');
      a.markIdle(busy.slice(60));
      assert.equal(a.size, 128, 'down to the share, and no further');
      // The releases are sent without waiting for them.
      await waitFor('a holds 128 in the database', async () => {
        const held = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_buckets WHERE owner = 'a' AND lease_until > now()`);
        return held[0]!.n === 128;
      });
      await b.tick(stats);
      assert.deepEqual([a.size, b.size], [128, 128]);
    });

    it('a relay short of its share ticks fast at most 8 times per change of the relay count', async () => {
      await reset();
      const a = keeper('a');
      const b = keeper('b');
      await a.tick(stats);
      await b.tick(stats);
      const delays = Array.from({ length: 10 }, () => b.nextTickDelayMs(INTERVAL));
      assert.deepEqual(delays, [...Array(8).fill(INTERVAL / 4), INTERVAL, INTERVAL]);
    });

    it("a crashed relay's buckets: the survivor ticks just after they run out, and then takes them all", async () => {
      await reset();
      const a = keeper('a');
      const b = keeper('b');
      await a.tick(stats);
      await b.tick(stats);
      await a.tick(stats);
      await b.tick(stats);
      assert.deepEqual([a.size, b.size], [128, 128]);
      // a crashes: it stops renewing. Its leases run out 2 s from now (its last renewal was a TTL ago, less 2 s).
      await db.query(`UPDATE "${db.schema}".outbox_buckets SET lease_until = now() + interval '2 seconds' WHERE owner = 'a'`);
      await db.query(`UPDATE "${db.schema}".outbox_relays SET heartbeat_at = now() - interval '58 seconds' WHERE relay_id = 'a'`);
      await b.tick(stats);
      const delay = b.nextTickDelayMs(INTERVAL);
      assert.ok(delay > 0 && delay <= 2_000 + 25, `b ticks when a's leases run out, not a whole interval later (asked for ${delay} ms)`);
      // Time passes: a's leases and heartbeat are past.
      await db.query(`UPDATE "${db.schema}".outbox_buckets SET lease_until = now() - interval '1 millisecond' WHERE owner = 'a'`);
      await db.query(`UPDATE "${db.schema}".outbox_relays SET heartbeat_at = now() - interval '61 seconds' WHERE relay_id = 'a'`);
      const change = await b.tick(stats);
      assert.equal(b.size, 256);
      assert.equal(change.liveRelays, 1);
      assert.equal(b.nextTickDelayMs(INTERVAL), INTERVAL, 'no other relay holds a lease: the regular interval');
    });
  });
}
