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

    it("a lane's leases are one object until they change: a hand-over, a release at a batch's end, or their deadline makes new ones", async () => {
      await reset();
      const a = keeper('a');
      await a.tick(stats);
      const first = a.laneLeases(0, 2);
      assert.equal(a.laneLeases(0, 2), first, 'the same object while nothing changed (no arrays per claim)');
      assert.equal(first.leases.length, 128);
      assert.ok(first.buckets.every((b, i) => b % 2 === 0 && b === first.leases[i]!.bucket));
      assert.deepEqual([...first.tokens.entries()], first.leases.map((l) => [l.bucket, l.token]));
      await a.tick(stats);
      const renewed = a.laneLeases(0, 2);
      assert.notEqual(renewed, first, 'a tick renews: new deadlines, a new view');
      const sorted = (xs: readonly number[]): number[] => [...xs].sort((x, y) => x - y);
      assert.deepEqual(sorted(renewed.buckets), sorted(first.buckets));
      assert.notEqual(a.laneLeases(1, 2), renewed);
      assert.equal(a.laneLeases(0, 3).buckets.every((b) => b % 3 === 0), true, 'another lane count: its own view');

      // b joins; a goes over its share while a batch of every bucket is in flight, then releases as the batch ends.
      const b = keeper('b');
      await b.tick(stats);
      const all = Array.from({ length: 256 }, (_, i) => i);
      a.markBusy(all);
      await a.tick(stats);
      const busyView = a.laneLeases(0, 2);
      assert.equal(busyView.leases.length, 128, 'nothing released mid-batch');
      a.markIdle(all);
      const after = a.laneLeases(0, 2);
      assert.notEqual(after, busyView, 'the release at the batch end changed the leases');
      assert.equal(after.leases.length + a.laneLeases(1, 2).leases.length, 128);

      // Leases that run out by the local clock leave the view without any tick.
      const short = new LeaseKeeper(new PostgresRelayStore({ schema: db.schema, connection: db.connection }), 'c', 300);
      await reset();
      await short.tick(stats);
      const held = short.laneLeases(0, 2);
      assert.equal(held.leases.length, 128);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(short.laneLeases(0, 2).leases.length, 0, 'past their local deadline: no lease left');
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
