/**
 * `Relay.stop()` on a database that hangs: its last statement, leave()
 * (give the leases back, drop out of the live relays), waits at most a
 * bounded time, then stop() warns and returns; the leases expire by
 * themselves, as after a crash (issue 11).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType, type Logger, type OutboxEvent, type PublishOutcome, type Transport } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

class AckingTransport implements Transport {
  readonly name = 'acking';
  readonly acked: string[] = [];
  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    for (const e of events) this.acked.push(e.id);
    return events.map(() => ({ ok: true }));
  }
  async close(): Promise<void> {}
}

/** The real store, except that leave() never answers (a database that stopped responding). */
class HangingLeaveStore extends PostgresRelayStore {
  leaves = 0;
  override leave(): Promise<void> {
    this.leaves++;
    return new Promise<void>(() => {});
  }
}

let db: TestDb;
before(async () => {
  db = await openDb('postgres');
});
after(async () => {
  await db.close();
});

it('stop() returns with a warning when leave() hangs, instead of waiting for the database forever', { timeout: 60_000 }, async () => {
  const warnings: { obj: object; msg: string | undefined }[] = [];
  const logger: Logger = { debug: () => {}, info: () => {}, error: () => {}, warn: (obj: object, msg?: string) => void warnings.push({ obj, msg }) };
  const store = new HangingLeaveStore({ schema: db.schema, connection: db.connection });
  const transport = new AckingTransport();
  const relay = createRelay({ store, transport, pollIntervalMs: 20, leaseTtlMs: 2000, logger });
  let stopped: { releasedBuckets: number } | undefined;
  relay.on('stopped', (e) => (stopped = e));
  await relay.start();
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
  const [id] = await db.transaction((tx) => outbox.enqueue(tx, OrderCreated({ aggregateId: 1, payload: { n: 1 } })));
  await waitFor('the event published', () => transport.acked.includes(id!));
  // Resolves (the test's own timeout fails it otherwise); how long it took is not asserted (the bound is documented).
  await relay.stop();
  assert.equal(store.leaves, 1);
  assert.deepEqual(stopped, { relayId: relay.relayId, releasedBuckets: 0 });
  const warning = warnings.find((w) => /leave/.test(w.msg ?? ''));
  assert.ok(warning, `a warning about leave(): ${JSON.stringify(warnings)}`);
  assert.match(warning.msg!, /did not answer within \d+ ms; the leases expire by themselves/);
});
