/**
 * A relay that takes over buckets claims their backlog at once, not at its
 * next poll: the lanes waiting for commits are woken when the lease tick
 * acquires buckets. Before, the rows of a relay that died (or of buckets
 * rebalanced to this relay) waited for a wake-up that never came when nothing
 * new was committed there: up to `pollIntervalMs` (1 s by default; in WAL mode
 * users raise it, and a WAL test with a 600 s poll timed out in the suite).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;

before(async () => {
  db = await openDb('postgres');
});
after(async () => {
  await db.close();
});

it('buckets acquired from an expired lease are claimed at once, with polling and NOTIFY out of the picture', { timeout: 60_000 }, async () => {
  const s = `"${db.schema}"`;
  await db.query(`UPDATE ${s}.outbox_buckets SET owner = NULL, lease_until = NULL`);
  await db.query(`DELETE FROM ${s}.outbox_relays`);
  // No NOTIFY: only a claim finds these rows.
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [E] });
  const ids = await db.transaction((tx) => outbox.enqueue(tx, Array.from({ length: 200 }, (_, n) => E({ aggregateId: `k${n}`, payload: { n } }))));
  // Half the buckets leased by a relay that died: its lease runs out in 3 s.
  await db.query(`UPDATE ${s}.outbox_buckets SET owner = 'dead-relay', lease_until = now() + interval '3 seconds' WHERE bucket >= 128`);
  const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.outbox WHERE bucket >= 128`);
  assert.ok(rows[0]!.n > 0 && rows[0]!.n < 200, `rows in both halves (${rows[0]!.n} in the dead relay's)`);

  const transport = new RecordingTransport();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 2000 });
  await relay.start();
  try {
    await waitFor("the free half's rows", () => transport.acked.length >= 200 - rows[0]!.n, 10_000);
    // The dead relay's lease runs out 3 s after it was set; the next lease tick takes its buckets.
    await waitFor('every row, the taken-over half included', () => new Set(transport.acked.map((e) => e.id)).size === ids.length, 15_000);
  } finally {
    await relay.stop();
  }
});
