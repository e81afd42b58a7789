import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType, TransportError, type Outbox } from 'txbox';
import { dropPublication, pgConnection, PostgresOutboxStore, PostgresRelayStore, type PostgresConnection } from 'txbox/postgres';
import { RecordingTransport, checkDeliveries } from 'txbox/testing';
import { postgresNames } from 'txbox/postgres';
import { BACKENDS, DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const OrderCreated = defineEvent({
  type: 'OrderCreated',
  aggregateType: 'Order',
  destination: 'orders',
  payload: payloadType<{ n: number }>(),
});
const Poison = defineEvent({ type: 'Poison', aggregateType: 'Order', destination: 'poison', payload: payloadType<{ n: number }>() });

/** The backends, and PostgreSQL in the WAL wake mode (producers without NOTIFY). */
const KINDS = [...BACKENDS, 'postgres-wal'] as const;
type Kind = (typeof KINDS)[number];
let wake: 'notify' | 'wal' = 'notify';

function setup(db: TestDb): Outbox {
  return createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: wake === 'notify' }), events: [OrderCreated, Poison] });
}

function storeFor(db: TestDb, connection: PostgresConnection = db.connection): PostgresRelayStore {
  return new PostgresRelayStore({ schema: db.schema, connection, wake });
}

function relayFor(db: TestDb, transport: RecordingTransport, extra: Partial<Parameters<typeof createRelay>[0]> = {}) {
  return createRelay({
    store: storeFor(db),
    transport,
    pollIntervalMs: 50,
    leaseTtlMs: 3000,
    retry: { baseDelayMs: 20, maxDelayMs: 100, maxAttempts: 4 },
    ...extra,
  });
}

/** Enqueues `perKey` events for each of `keys` aggregates, one transaction per event; returns key -> ids. */
async function produce(db: TestDb, outbox: Outbox, keys: number, perKey: number): Promise<Map<string, string[]>> {
  const committed = new Map<string, string[]>();
  for (let i = 0; i < perKey; i++) {
    await db.transaction(async (tx) => {
      const events = Array.from({ length: keys }, (_, k) => OrderCreated({ aggregateId: k, payload: { n: i }, version: i + 1 }));
      const ids = await outbox.enqueue(tx, events);
      ids.forEach((id, k) => {
        const key = `Order:${k}`;
        committed.set(key, [...(committed.get(key) ?? []), id]);
      });
    });
  }
  return committed;
}

for (const variant of KINDS) {
  describe(`relay on ${variant}`, () => {
    const kind: Exclude<Kind, 'postgres-wal'> = variant === 'postgres-wal' ? 'postgres' : variant;
    let db: TestDb;
    before(async () => {
      wake = variant === 'postgres-wal' ? 'wal' : 'notify';
      db = await openDb(kind);
    });
    after(async () => {
      if (variant === 'postgres-wal') await dropPublication(db.connection, postgresNames({ schema: db.schema }));
      await db.close();
    });

    it('publishes every committed event once, in per-key order, and nothing rolled back', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const committed = await produce(db, outbox, 20, 25);
      await assert.rejects(
        db.transaction(async (tx) => {
          await outbox.enqueue(tx, OrderCreated({ aggregateId: 'rolled-back', payload: { n: 1 } }));
          throw new Error('business rule failed');
        }),
        /business rule failed/,
      );
      const transport = new RecordingTransport();
      const relay = relayFor(db, transport, { batchSize: 37 });
      await relay.start();
      await waitFor('all published', () => transport.acked.length >= 500);
      await relay.stop();
      const report = checkDeliveries(committed, transport.acked);
      assert.deepEqual(report, { committed: 500, delivered: 500, lost: 0, phantom: 0, duplicates: 0, orderViolations: 0 });
      assert.equal(transport.contractViolation, undefined);
      const [row] = await db.query<{ pending: number; published: number }>(
        `SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending, count(*) FILTER (WHERE state = 'published')::int AS published FROM "${db.schema}".outbox`,
      );
      assert.deepEqual(row, { pending: 0, published: 500 });
    });

    it('retries with backoff, keeps the key in order, and parks after max attempts while other keys drain', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const committed = new Map<string, string[]>();
      // Key Order:poison: its first event fails forever; 99 other keys flow.
      await db.transaction(async (tx) => {
        const events = [];
        for (let round = 0; round < 3; round++) {
          for (let k = 0; k < 100; k++) events.push(OrderCreated({ aggregateId: k === 0 ? 'poison' : k, payload: { n: round } }));
        }
        const ids = await outbox.enqueue(tx, events);
        events.forEach((e, i) => {
          const key = `Order:${e.aggregateId}`;
          committed.set(key, [...(committed.get(key) ?? []), ids[i]!]);
        });
      });
      const poisonHead = committed.get('Order:poison')![0]!;
      // Every key also fails its first attempt once, retriably.
      const transport = new RecordingTransport({
        fail: (e, attempt) =>
          e.id === poisonHead ? new TransportError('retriable', 'HTTP 503') : attempt === 1 ? new TransportError('retriable', 'timeout') : undefined,
      });
      const relay = relayFor(db, transport);
      const parked: string[] = [];
      relay.on('parked', (e) => parked.push(e.id));
      await relay.start();
      await waitFor('99 keys drained and poison parked', () => transport.acked.length >= 297 && parked.length === 1);
      await new Promise((r) => setTimeout(r, 300)); // the poison key must stay held
      await relay.stop();
      assert.deepEqual(parked, [poisonHead]);
      assert.equal(transport.attempts.get(poisonHead), 4);
      assert.equal(transport.acked.filter((e) => e.key === 'Order:poison').length, 0, 'a parked event holds its key');
      const others = new Map([...committed].filter(([k]) => k !== 'Order:poison'));
      const report = checkDeliveries(others, transport.acked);
      assert.equal(report.lost, 0);
      assert.equal(report.orderViolations, 0);
      const [row] = await db.query<{ attempts: number; last_error: string; state: string }>(
        `SELECT attempts, last_error, state FROM "${db.schema}".outbox WHERE id = $1`,
        [poisonHead],
      );
      assert.equal(row!.state, 'parked');
      assert.equal(row!.attempts, 4);
      assert.match(row!.last_error, /gave up after 4 attempts; last error retriable: HTTP 503/);
    });

    it('parks a permanent failure at once, and with skipParkedDestinations lets its key go on', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      let ids: string[] = [];
      await db.transaction(async (tx) => {
        ids = await outbox.enqueue(tx, [
          Poison({ aggregateId: 1, payload: { n: 0 } }),
          OrderCreated({ aggregateId: 1, payload: { n: 1 } }),
        ]);
      });
      const transport = new RecordingTransport({
        fail: (e) => (e.destination === 'poison' ? new TransportError('permanent', 'HTTP 400 bad request') : undefined),
      });
      const held = relayFor(db, transport);
      await held.start();
      await waitFor('parked', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked'`)).length === 1);
      await new Promise((r) => setTimeout(r, 200));
      await held.stop();
      assert.equal(transport.attempts.get(ids[0]!), 1, 'permanent errors are not retried');
      assert.equal(transport.acked.length, 0, 'the key is held behind its parked event');

      const skipping = relayFor(db, transport, { skipParkedDestinations: ['poison'] });
      await skipping.start();
      await waitFor('second event published', () => transport.acked.length === 1);
      await skipping.stop();
      assert.equal(transport.acked[0]!.id, ids[1]);
    });

    it('routes to two transports: marked published only when both acked; a failing route retries alone', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const committed = await produce(db, outbox, 10, 5);
      const healthy = new RecordingTransport();
      const flaky = new RecordingTransport({ fail: (_e, attempt) => (attempt <= 2 ? new TransportError('retriable', 'broker down') : undefined) });
      const relay = createRelay({
        store: storeFor(db),
        routes: [
          { name: 'http', transport: healthy },
          { name: 'kafka', transport: flaky, destinations: ['orders'] },
        ],
        pollIntervalMs: 50,
        retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 10 },
      });
      await relay.start();
      await waitFor('both routes have everything', () => new Set(flaky.acked.map((e) => e.id)).size === 50 && healthy.acked.length >= 50);
      await waitFor('all marked', async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state <> 'published'`))[0]!.n === 0);
      await relay.stop();
      assert.equal(healthy.acked.length, 50, 'the healthy route never re-sent');
      for (const t of [healthy, flaky]) {
        const r = checkDeliveries(committed, t.acked);
        assert.equal(r.lost, 0);
        assert.equal(r.orderViolations, 0);
      }
      const [row] = await db.query<{ routes: string[] }>(`SELECT routes_done AS routes FROM "${db.schema}".outbox LIMIT 1`);
      assert.deepEqual(row!.routes, ['http'], 'the healthy route was remembered while the other retried');
    });

    it('parks an event that no route takes', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      await db.transaction((tx) => outbox.enqueue(tx, Poison({ aggregateId: 9, payload: { n: 0 } })));
      const relay = createRelay({
        store: storeFor(db),
        routes: [{ name: 'orders-only', transport: new RecordingTransport(), destinations: ['orders'] }],
        pollIntervalMs: 50,
      });
      await relay.start();
      await waitFor('parked', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked' AND last_error LIKE '%no route for destination "poison"%'`)).length === 1);
      await relay.stop();
    });

    it('stops gracefully: in-flight batch finishes and leases are released', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      await produce(db, outbox, 10, 1);
      const transport = new RecordingTransport({ latencyMs: 300 });
      const relay = relayFor(db, transport);
      await relay.start();
      await waitFor('a call in flight', () => transport.calls.length > 0);
      await relay.stop();
      const sent = transport.calls.reduce((a, b) => a + b, 0);
      assert.ok(transport.acked.length > 0);
      assert.equal(transport.acked.length, sent, 'every in-flight publish finished');
      const [row] = await db.query<{ published: number; pending: number; owned: number }>(
        `SELECT (SELECT count(*) FROM "${db.schema}".outbox WHERE state = 'published')::int AS published,
                (SELECT count(*) FROM "${db.schema}".outbox WHERE state = 'pending')::int AS pending,
                (SELECT count(*) FROM "${db.schema}".outbox_buckets WHERE owner IS NOT NULL)::int AS owned`,
      );
      assert.deepEqual(row, { published: sent, pending: 10 - sent, owned: 0 }, 'acked work is marked, the rest stays pending');
    });

    it('a notification that lands while a lane claims wakes that lane at once, not at the next poll', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const store = storeFor(db);
      const signal = new AbortController().signal;
      await store.waitForEvents(1, signal); // starts LISTEN (or the WAL stream)
      if (wake === 'wal') await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
      const seen = store.wakeups();
      // The claim that read `seen` runs here and finds nothing; then a producer commits and notifies.
      await produce(db, outbox, 1, 1);
      await waitFor('the notification', () => store.wakeups() > seen);
      const started = Date.now();
      await store.waitForEvents(60_000, signal, seen);
      assert.ok(Date.now() - started < 5_000, 'returned without waiting for the poll interval');
      await store.close();
    });

    it('stores every envelope field of a multi-event enqueue exactly as a single-event enqueue does, in call order', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const at = new Date('2026-01-02T03:04:05.678Z');
      const event = (n: number, version?: number) =>
        OrderCreated({
          aggregateId: `env-${n}`,
          key: `tenant-1:order-${n}`,
          payload: { n },
          headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`, 'x-quote': 'say "hi"\\' },
          occurredAt: at,
          ...(version === undefined ? {} : { version }),
        });
      const single = await db.transaction((tx) => outbox.enqueue(tx, event(0, 7)));
      const many = await db.transaction((tx) => outbox.enqueue(tx, [event(1, 8), event(2), event(3, 9_007_199_254_740_991)]));
      const rows = await db.query<Record<string, unknown>>(
        `SELECT id::text, type, aggregate_type, aggregate_id, key, destination, payload::text AS payload, headers,
                to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS') AS occurred_at, version::text, state
         FROM "${db.schema}".outbox ORDER BY seq`,
      );
      assert.deepEqual(rows.map((r) => r.id), [...single, ...many], 'rows in call order, with the returned ids');
      const expected = (n: number, version: string | null) => ({
        type: 'OrderCreated',
        aggregate_type: 'Order',
        aggregate_id: `env-${n}`,
        key: `tenant-1:order-${n}`,
        destination: 'orders',
        payload: `{"n":${n}}`,
        headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`, 'x-quote': 'say "hi"\\' },
        occurred_at: '2026-01-02T03:04:05.678',
        version,
        state: 'pending',
      });
      const { id: _single, ...first } = rows[0]!;
      assert.deepEqual(first, expected(0, '7'));
      rows.slice(1).forEach(({ id: _id, ...row }, i) => assert.deepEqual(row, expected(i + 1, ['8', null, '9007199254740991'][i]!)));
    });

    it('hands transports the payload text as enqueued (key order, no added spaces) and parses payload only on demand', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      // Keys out of jsonb's order (shorter first), nesting, unicode and escapes.
      const payload = { zeta: 1, a: [1, { y: 'é\u2028"q"', b: null }], n: 2 } as unknown as { n: number };
      const text = JSON.stringify(payload);
      await db.transaction((tx) => outbox.enqueue(tx, [OrderCreated({ aggregateId: 'bytes', payload }), OrderCreated({ aggregateId: 'bytes', payload: { n: 3 } })]));
      const transport = new RecordingTransport();
      const relay = relayFor(db, transport);
      await relay.start();
      await waitFor('published', () => transport.acked.length >= 2);
      await relay.stop();
      const [first, second] = transport.acked;
      assert.equal(first!.payloadJson, text);
      assert.equal(second!.payloadJson, '{"n":3}');
      assert.deepEqual(first!.payload, payload);
      assert.deepEqual({ ...first! }.payload, payload, 'a spread copy carries the parsed payload');
      assert.equal(JSON.stringify(first!.payload), text);
      const [row] = await db.query<{ t: string }>(`SELECT payload::text AS t FROM "${db.schema}".outbox WHERE id = $1`, [first!.id]);
      assert.equal(row!.t, text, 'stored as written');
    });

    it('with polling effectively off, notifications alone deliver every event, also with commits landing while lanes claim', async () => {
      await db.query(`TRUNCATE "${db.schema}".outbox`);
      const outbox = setup(db);
      const transport = new RecordingTransport();
      // A claim that takes a while after its snapshot, as on a loaded database: commits land inside it.
      class SlowClaims extends PostgresRelayStore {
        override async claim(...args: Parameters<PostgresRelayStore['claim']>) {
          const events = await super.claim(...args);
          await new Promise((r) => setTimeout(r, 40));
          return events;
        }
      }
      // On PostgreSQL the relay gets its own pool, so that its claims never queue behind the producer's transactions.
      const connection = kind === 'postgres' ? pgConnection({ connectionString: DATABASE_URL, maxConnections: 4 }) : db.connection;
      const relay = createRelay({
        store: new SlowClaims({ schema: db.schema, connection, wake }),
        transport,
        lanes: 2,
        pollIntervalMs: 600_000,
        minPollIntervalMs: 600_000,
      });
      await relay.start();
      try {
        // Keys of the even lane (a) and of the odd lane (b): buckets go to lanes by bucket % lanes.
        const lane = async (id: string) => (await db.query<{ b: number }>(`SELECT (hashtext($1) & 255) % 2 AS b`, [`Order:${id}`]))[0]!.b;
        const ids = { a: [] as string[], b: [] as string[] };
        for (let i = 0; ids.a.length < 8 || ids.b.length < 8; i++) ((await lane(`k${i}`)) === 0 ? ids.a : ids.b).push(`k${i}`);
        // Pairs: the first commit wakes both lanes; the second lands in the other lane while both are inside their claims.
        for (let i = 0; i < 8; i++) {
          await db.transaction((tx) => outbox.enqueue(tx, OrderCreated({ aggregateId: ids.a[i]!, payload: { n: i } })));
          await new Promise((r) => setTimeout(r, 10));
          await db.transaction((tx) => outbox.enqueue(tx, OrderCreated({ aggregateId: ids.b[i]!, payload: { n: i } })));
          await new Promise((r) => setTimeout(r, 150));
        }
        await waitFor('all 16 events published by notification', () => transport.acked.length >= 16, 10_000);
      } finally {
        await relay.stop();
      }
    });
  });
}
