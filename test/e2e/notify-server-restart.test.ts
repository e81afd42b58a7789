/**
 * A relay in the NOTIFY wake mode across a PostgreSQL restart, on a private
 * throwaway cluster (the shared server is never restarted): its claims fail
 * while the server is down, its pool and its LISTEN connection come back by
 * themselves, and a commit after the restart wakes it by NOTIFY alone
 * (polling every 10 minutes). The WAL mode's twin is wal-server-restart.test.ts.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { privatePostgresForFile } from '../helpers/private-postgres.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
const cluster = privatePostgresForFile();

it('is woken by NOTIFY again after the server restarts, and publishes what was committed before and after', { skip: cluster.skip, timeout: 90_000 }, async () => {
  const connection = await cluster.connect(4);
  const outbox = createOutbox({ store: new PostgresOutboxStore(), events: [E] });
  const produce = (n: number) => connection.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: `k${n}`, payload: { n } })));
  const transport = new RecordingTransport();
  const store = new PostgresRelayStore({ connection });
  const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 4000 });
  const failed: string[] = [];
  relay.on('error', ({ phase }) => failed.push(phase)); // the claims and renewals that fail while the server is down
  await relay.start();
  try {
    const [first] = await produce(1);
    await waitFor('published before the restart', () => transport.acked.some((e) => e.id === first), 30_000);

    await cluster.server().restart(3000); // down for 3 s: the relay's claims and lease renewals fail meanwhile
    // Committed at once after the restart, maybe before the LISTEN connection is back: the reconnect's catch-up
    // wake-up or the NOTIFY itself must wake the relay, never the 10-minute poll.
    const [second] = await produce(2);
    await waitFor('published after the restart, woken by NOTIFY', () => transport.acked.some((e) => e.id === second), 30_000);
    assert.ok(failed.length > 0, 'the relay noticed the outage');
    assert.equal(relay.heldBuckets, 256, 'every bucket leased again');
  } finally {
    await relay.stop();
  }
});
