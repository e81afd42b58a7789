/**
 * A destination that answers nothing at all: every publish call of the
 * transport hangs until the relay's publish timeout aborts it (a broker host
 * gone or a firewall dropping its packets, as most clients see it: their
 * own request timeouts are longer, or they retry inside the call). That is
 * about the destination, not the events: the relay must pause it
 * (destination-down, no attempt counted), not spend each event's attempts
 * and park every key's head event after `maxAttempts` timeouts.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType, type OutboxEvent, type PublishOutcome, type Transport } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { openDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const Shipped = defineEvent({ type: 'Shipped', aggregateType: 'Parcel', destination: 'parcels', payload: payloadType<{ n: number }>() });

class SilentUntilToldTransport implements Transport {
  readonly name = 'silent';
  answering = false;
  calls = 0;
  readonly acked: OutboxEvent[] = [];
  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.calls++;
    if (!this.answering) {
      // Never answers: the relay's publish timeout ends the call (the signal aborts, nothing resolves).
      await new Promise<never>(() => {});
    }
    this.acked.push(...events);
    return events.map(() => ({ ok: true as const }));
  }
  async close(): Promise<void> {}
}

it('a transport that answers nothing pauses its destination: no attempt counted, nothing parked, all published once it answers', { timeout: 60_000 }, async () => {
  const db = await openDb('postgres');
  const transport = new SilentUntilToldTransport();
  const changes: string[] = [];
  const relay = createRelay({
    store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
    transport,
    pollIntervalMs: 50,
    publishTimeoutMs: 200,
    retry: { baseDelayMs: 10, maxDelayMs: 20, maxAttempts: 2 },
    circuitBreaker: { baseDelayMs: 100, maxDelayMs: 300 },
  });
  relay.on('circuit', (c) => void changes.push(`${c.destination} ${c.state}`));
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Shipped] });
  const rows = () => db.query<{ state: string; attempts: number; n: number }>(`SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox GROUP BY 1, 2 ORDER BY 1, 2`);
  try {
    await relay.start();
    for (let n = 0; n < 4; n++) await db.transaction((tx) => outbox.enqueue(tx, Shipped({ aggregateId: n, payload: { n } })));
    await waitFor('the circuit opened', () => Promise.resolve(changes.includes('parcels open')), 15_000, 20);
    await waitFor('several probes timed out', () => Promise.resolve(changes.filter((c) => c === 'parcels probe-failed').length >= 3), 15_000, 20);
    assert.deepEqual(await rows(), [{ state: 'pending', attempts: 0, n: 4 }], 'more timeouts than maxAttempts: none counted, none parked');
    transport.answering = true;
    await waitFor('every event published', async () => (await rows()).every((r) => r.state === 'published'), 15_000, 50);
    assert.deepEqual(await rows(), [{ state: 'published', attempts: 1, n: 4 }]);
    assert.ok(changes.includes('parcels closed'));
  } finally {
    await relay.stop();
    await db.close();
  }
});
