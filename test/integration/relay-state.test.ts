/**
 * The relays table behind `txbox status`: a clean stop marks the row left
 * (it stays), a heartbeat makes a left relay alive again, left relays do not
 * count as live for the bucket share, and rows idle for 24 hours are
 * deleted by the heartbeat. Real PostgreSQL and PGlite.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PostgresAdmin, PostgresRelayStore } from 'txbox/postgres';
import { BACKENDS, openDb } from '../helpers/databases.ts';

const beat = (id: string) => ({ relayId: id, host: 'h', pid: 1, inFlight: 5, publishedTotal: 0, ratePerMinute: 0 });

for (const kind of BACKENDS) {
  describe(`relay states on ${kind}`, () => {
    it('leave marks the row left; a heartbeat revives it; left rows are not live; rows idle 24 h are deleted', async () => {
      const db = await openDb(kind);
      try {
        const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
        const admin = new PostgresAdmin(db.connection, { schema: db.schema });
        const r = `"${db.schema}".outbox_relays`;
        await store.heartbeat(beat('a'), 30_000);
        await store.heartbeat(beat('b'), 30_000);
        await store.leave('b', []);
        let states = new Map((await admin.relayStatus()).map((s) => [s.relayId, s]));
        assert.equal(states.get('a')!.state, 'alive');
        assert.equal(states.get('a')!.leaseTtlMs, 30_000);
        assert.equal(states.get('b')!.state, 'left');
        assert.equal(states.get('b')!.inFlight, 0, 'a relay that left has nothing in flight');
        assert.equal((await store.heartbeat(beat('a'), 30_000)).liveRelays, 1, 'a relay that left is not live');

        await store.heartbeat(beat('b'), 30_000);
        states = new Map((await admin.relayStatus()).map((s) => [s.relayId, s]));
        assert.equal(states.get('b')!.state, 'alive', 'starting again with the same id revives the row');

        await db.query(`INSERT INTO ${r} (relay_id, host, pid, heartbeat_at, lease_ttl_ms) VALUES ('dead-old', 'h', 2, now() - interval '25 hours', 30000)`);
        await db.query(`INSERT INTO ${r} (relay_id, host, pid, heartbeat_at, left_at) VALUES ('left-old', 'h', 3, now() - interval '26 hours', now() - interval '25 hours')`);
        await db.query(`INSERT INTO ${r} (relay_id, host, pid, heartbeat_at, left_at) VALUES ('left-recent', 'h', 4, now() - interval '2 hours', now() - interval '1 hour')`);
        await db.query(`INSERT INTO ${r} (relay_id, host, pid, heartbeat_at, lease_ttl_ms) VALUES ('dead-recent', 'h', 5, now() - interval '3 minutes', 1000)`);
        await store.heartbeat(beat('a'), 30_000);
        const after = new Map((await admin.relayStatus()).map((s) => [s.relayId, s]));
        assert.deepEqual([...after.keys()].sort(), ['a', 'b', 'dead-recent', 'left-recent']);
        assert.equal(after.get('dead-recent')!.state, 'expired');
        assert.ok(after.get('dead-recent')!.stateAgeSeconds >= 178 && after.get('dead-recent')!.stateAgeSeconds < 200, String(after.get('dead-recent')!.stateAgeSeconds));
        assert.equal(after.get('left-recent')!.state, 'left');
        assert.ok(after.get('left-recent')!.stateAgeSeconds >= 3599 && after.get('left-recent')!.stateAgeSeconds < 3700);
      } finally {
        await db.close();
      }
    });
  });
}
