/**
 * The WAL wake mode across a PostgreSQL restart, on a private throwaway
 * cluster (the shared server is never restarted): the relay's stream ends with
 * the server, it falls back and retries, then streams from a new temporary
 * slot and is woken by the WAL alone again (polling every 10 minutes).
 * Skipped where initdb is not available. The restart runs pg_ctl without
 * blocking this process: a fast shutdown waits for the walsender to be told
 * (by the relay, in this process) that it received everything.
 */
import { it } from 'node:test';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { privatePostgresForFile } from '../helpers/private-postgres.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
const cluster = privatePostgresForFile();

it('streams again from a new slot after the server restarts', { skip: cluster.skip, timeout: 90_000 }, async () => {
  const connection = await cluster.connect(4);
  const outbox = createOutbox({ store: new PostgresOutboxStore({ notify: false }), events: [E] });
  const produce = (n: number) => connection.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: `k${n}`, payload: { n } })));
  const transport = new RecordingTransport();
  const store = new PostgresRelayStore({ connection, wake: 'wal' });
  const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 4000 });
  relay.on('error', () => {}); // the claims and renewals that fail while the server is down
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000);
    const before = (await store.wakeStatus()).slot;
    const [first] = await produce(1);
    await waitFor('published before the restart', () => transport.acked.some((e) => e.id === first));

    await cluster.server().restart();

    await waitFor('streaming from a new slot', async () => {
      const s = await store.wakeStatus().catch(() => undefined);
      return s?.mode === 'wal' && s.slot !== before;
    }, 60_000, 200);
    const [second] = await produce(2);
    await waitFor('published after the restart, woken by the WAL', () => transport.acked.some((e) => e.id === second), 30_000);
  } finally {
    await relay.stop();
  }
});
