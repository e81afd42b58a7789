/**
 * docs/guarantees.md, invariant 3: a transaction that took a lower seq but commits
 * after higher seqs were published must still be published.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;
let pool: pg.Pool;

before(async () => {
  db = await openDb('postgres');
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
});
after(async () => {
  await pool.end();
  await db.close();
});

it('publishes a lower seq that commits after higher seqs were published', async () => {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [E] });
  const transport = new RecordingTransport();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 30 });
  await relay.start();
  try {
    const slow = await pool.connect();
    await slow.query('BEGIN');
    const [late] = await outbox.enqueue(slow, E({ aggregateId: 'slow', payload: { n: 1 } })); // takes the lower seq, stays open
    const fast = await pool.connect();
    await fast.query('BEGIN');
    const [early] = await outbox.enqueue(fast, E({ aggregateId: 'fast', payload: { n: 2 } }));
    await fast.query('COMMIT');
    fast.release();
    await waitFor('the higher seq published', () => transport.acked.some((e) => e.id === early));
    const [seqs] = await db.query<{ late: string; early: string }>(
      `SELECT (SELECT seq FROM "${db.schema}".outbox WHERE id = $1)::text AS early, (SELECT max(seq) FROM "${db.schema}".outbox)::text AS late`,
      [early],
    );
    assert.ok(Number(seqs!.late) >= Number(seqs!.early));
    await new Promise((r) => setTimeout(r, 200)); // several claims pass the gap
    await slow.query('COMMIT');
    slow.release();
    await waitFor('the lower seq published after its late commit', () => transport.acked.some((e) => e.id === late));
    const [row] = await db.query<{ s1: string; s2: string }>(
      `SELECT (SELECT seq FROM "${db.schema}".outbox WHERE id = $1)::text AS s1, (SELECT seq FROM "${db.schema}".outbox WHERE id = $2)::text AS s2`,
      [late, early],
    );
    assert.ok(Number(row!.s1) < Number(row!.s2), 'the late transaction really held the lower seq');
  } finally {
    await relay.stop();
  }
});
