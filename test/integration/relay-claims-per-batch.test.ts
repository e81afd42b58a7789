/**
 * How many claims a relay lane runs per batch when it is woken for one
 * commit (the NOTIFY mode, polling off): the claim that returns the event,
 * then one that comes back empty, then the wait. Before 28 Nov 2026 the lane
 * ran a second empty claim after every batch: its claim after the mark was
 * taken for a claim made while marking, which is no answer yet and is
 * repeated. One wasted statement per batch, on a database that answers every
 * single-event commit with its own batch. On PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });

for (const kind of BACKENDS) {
  describe(`claims per batch on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
    });
    after(async () => {
      await db.close();
    });

    it('a lane woken by one commit claims it, finds nothing more once, and waits', async () => {
      const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
      const transport = new RecordingTransport();
      const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, lanes: 1 });
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: true, notifyIntervalMs: 0 }), events: [E] });
      await relay.start();
      try {
        await waitFor('the lane waits', async () => {
          const before = store.claimStats().ordinary;
          await new Promise((r) => setTimeout(r, 200));
          return before > 0 && store.claimStats().ordinary === before;
        });
        for (let n = 1; n <= 3; n++) {
          const before = store.claimStats().ordinary;
          const [id] = await db.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: `a${n}`, payload: { n } })));
          await waitFor('published', () => transport.acked.some((e) => e.id === id));
          await new Promise((r) => setTimeout(r, 300)); // the mark, and whatever the lane claims after it
          assert.equal(store.claimStats().ordinary - before, 2, `commit ${n}: the claim that returned it, one empty claim, then the wait`);
        }
      } finally {
        await relay.stop();
      }
    });
  });
}
