/**
 * `Relay.start()` that fails on its first lease tick cleans up (transports
 * closed, relay back to idle) and can be called again (issue 11 item 13).
 * The transports start while the first lease tick runs; a transport that
 * fails after the tick took leases leaves none behind.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType, type OutboxEvent, type PublishOutcome, type Transport } from 'txbox';
import { migratePostgres, postgresNames, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

/** Counts start and close; acks every event while open. */
class CountingTransport implements Transport {
  readonly name = 'counting';
  /** Makes start() throw, as a broker that refuses the connection. */
  failStart = false;
  starts = 0;
  closes = 0;
  readonly acked: string[] = [];
  get open(): boolean {
    return this.starts > this.closes;
  }
  async start(): Promise<void> {
    this.starts++;
    if (this.failStart) throw new Error('connection refused (injected)');
  }
  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    if (!this.open) throw new Error('publish on a closed transport');
    for (const e of events) this.acked.push(e.id);
    return events.map(() => ({ ok: true }));
  }
  async close(): Promise<void> {
    this.closes++;
  }
}

/**
 * A transport whose start() waits until `relayId` holds leases in the database (the first lease tick
 * ran while it was starting), then fails or succeeds. Gives up after 5 s: a relay that starts its
 * transports before its first lease tick never gets there.
 */
class LeaseWatchingTransport extends CountingTransport {
  constructor(
    private readonly db: TestDb,
    private readonly relayId: () => string,
  ) {
    super();
  }
  override async start(): Promise<void> {
    const deadline = Date.now() + 5000;
    for (;;) {
      const [row] = await this.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${postgresNames({ schema: this.db.schema }).buckets} WHERE owner = $1 AND lease_until > now()`,
        [this.relayId()],
      );
      if (row!.n > 0) break;
      if (Date.now() > deadline) throw new Error('no lease taken while the transport started');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await super.start();
  }
}

describe('relay start failure', () => {
  let db: TestDb;
  before(async () => {
    db = await openDb('postgres', { migrate: false });
  });
  after(async () => {
    await db.close();
  });

  it('a first lease tick the database refuses closes the transports it opened, and start() succeeds once the database is there', async () => {
    const transport = new CountingTransport();
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport,
      pollIntervalMs: 20,
      leaseTtlMs: 3000,
    });
    // The schema is not migrated yet: the first heartbeat fails (relation does not exist).
    await assert.rejects(relay.start(), /does not exist/);
    assert.deepEqual({ starts: transport.starts, closes: transport.closes }, { starts: 1, closes: 1 }, 'the transport opened by start() is closed');
    await migratePostgres(db.connection, postgresNames({ schema: db.schema }));
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
    const [id] = await db.transaction((tx) => outbox.enqueue(tx, OrderCreated({ aggregateId: 1, payload: { n: 1 } })));
    await relay.start();
    try {
      await waitFor('the event published', () => transport.acked.includes(id!));
    } finally {
      await relay.stop();
    }
    assert.deepEqual({ starts: transport.starts, closes: transport.closes }, { starts: 2, closes: 2 });
  });

  it("a transport whose start fails: the transports opened before it are closed, and start() can be called again", async () => {
    await migratePostgres(db.connection, postgresNames({ schema: db.schema }));
    const first = new CountingTransport();
    const second = new CountingTransport();
    second.failStart = true;
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      routes: [
        { name: 'one', transport: first },
        { name: 'two', transport: second },
      ],
      pollIntervalMs: 20,
      leaseTtlMs: 3000,
    });
    await assert.rejects(relay.start(), /connection refused \(injected\)/);
    assert.deepEqual([first.starts, first.closes, second.starts, second.closes], [1, 1, 1, 1]);
    second.failStart = false;
    await relay.start();
    await relay.stop();
    assert.deepEqual([first.starts, first.closes, second.starts, second.closes], [2, 2, 2, 2]);
  });

  it('the transports start while the first lease tick runs; one that then fails leaves no lease behind', async () => {
    await migratePostgres(db.connection, postgresNames({ schema: db.schema }));
    const names = postgresNames({ schema: db.schema });
    let relayId = '';
    const transport = new LeaseWatchingTransport(db, () => relayId);
    transport.failStart = true;
    const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 20, leaseTtlMs: 3000 });
    relayId = relay.relayId;
    await assert.rejects(relay.start(), /connection refused \(injected\)/);
    assert.deepEqual({ starts: transport.starts, closes: transport.closes }, { starts: 1, closes: 1 });
    const [held] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${names.buckets} WHERE owner = $1`, [relayId]);
    assert.equal(held!.n, 0, 'the leases the first tick took are given back');
    const [row] = await db.query<{ left: boolean }>(`SELECT left_at IS NOT NULL AS left FROM ${names.relays} WHERE relay_id = $1`, [relayId]);
    assert.equal(row!.left, true, 'the relay is marked left, not counted live by others');
    transport.failStart = false;
    await relay.start();
    try {
      assert.ok(relay.heldBuckets > 0);
    } finally {
      await relay.stop();
    }
  });
});
