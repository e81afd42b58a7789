/**
 * The WAL wake mode and a commit the stream announces before it is visible.
 *
 * The walsender decodes a commit once its record is flushed, but the
 * committing backend becomes visible to new snapshots a moment later, and much
 * later under synchronous replication: the commit waits for the standby after
 * its local flush. Claims made on the announcement then miss the row. The
 * relay must keep looking for it, not leave it to the next poll (here 10
 * minutes).
 *
 * A private throwaway cluster (server-wide settings): synchronous_standby_names
 * names a standby that never connects, every session commits with
 * synchronous_commit=local except the producer's transaction, which asks for
 * `on` and so stays committed-but-invisible until its wait is cancelled.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { privatePostgresForFile } from '../helpers/private-postgres.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
const cluster = privatePostgresForFile({ synchronous_standby_names: 'ghost', synchronous_commit: 'local' });

it('publishes a row announced before it was visible, once it is, without waiting for the poll', { skip: cluster.skip, timeout: 60_000 }, async () => {
  const connection = await cluster.connect(6);
  const outbox = createOutbox({ store: new PostgresOutboxStore({ notify: false }), events: [E] });
  const transport = new RecordingTransport();
  const store = new PostgresRelayStore({ connection, wake: 'wal', walFullClaimEveryMs: 600_000 });
  const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000 });
  const errors: Error[] = [];
  relay.on('error', ({ error }) => errors.push(error));
  await relay.start();
  // The producer commits on a client of its own: its COMMIT waits for the standby that never comes.
  const producer = new pg.Client({ connectionString: cluster.server().url });
  producer.on('notice', () => {}); // "canceling wait for synchronous replication"
  await producer.connect();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000);
    // Every bucket claimed once by the ordinary claim, so later claims go by seq (a first event, published).
    const [warm] = await connection.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: 'warm', payload: { n: 0 } })));
    await waitFor('the first event published', () => transport.acked.some((e) => e.id === warm), 30_000);
    const before = store.claimStats();

    const pid = (await producer.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await producer.query('BEGIN');
    await producer.query('SET LOCAL synchronous_commit = on');
    const [id] = await outbox.enqueue(producer, E({ aggregateId: 'late', payload: { n: 1 } }));
    const committed = producer.query('COMMIT');
    // Announced by the stream and claimed by seq, not visible: missed at least twice, then the ordinary claim.
    await waitFor('claims that missed the announced row', () => {
      const s = store.claimStats();
      return s.bySeq - before.bySeq >= 2 && s.ordinary > before.ordinary;
    }, 30_000);
    assert.equal(transport.acked.some((e) => e.id === id), false, 'published before it was visible');
    await new Promise((r) => setTimeout(r, 100)); // past the 1 ms second look and the ordinary claim: only the later looks find it now

    // The standby wait cancelled: the commit (already in the WAL) becomes visible, and nothing announces it again.
    const visibleAt = performance.now();
    await connection.query('SELECT pg_cancel_backend($1)', [pid]);
    await committed;
    await waitFor('published once visible', () => transport.acked.some((e) => e.id === id), 10_000, 5);
    const ms = performance.now() - visibleAt;
    assert.ok(ms < 5000, `published ${ms.toFixed(0)} ms after it became visible`);
    assert.deepEqual(errors, []);
  } finally {
    await producer.end().catch(() => {});
    await relay.stop();
  }
});
