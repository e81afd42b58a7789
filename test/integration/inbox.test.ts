/**
 * The inbox on the real PostgreSQL and on PGlite: exactly-once effect under
 * redelivery, poison handlers dead-lettered while other keys flow, version-
 * guarded projections with gap detection and holding, operator retries.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, defineEvent, payloadType, uuidv7, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, PostgresInboxAdmin, applyVersioned, inboxNames, migrateInbox } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

const StockChanged = defineEvent({ type: 'StockChanged', aggregateType: 'Sku', destination: 'stock', payload: payloadType<{ quantity: number }>() });

function stockEvent(sku: string, version: number, quantity: number, id = uuidv7()): OutboxEvent {
  return {
    id,
    type: 'StockChanged',
    aggregateType: 'Sku',
    aggregateId: sku,
    key: `Sku:${sku}`,
    destination: 'stock',
    payload: { quantity },
    headers: {},
    occurredAt: new Date(),
    version,
  };
}

for (const kind of BACKENDS) {
  describe(`inbox on ${kind}`, () => {
    let db: TestDb;
    let store: PostgresInboxStore;
    before(async () => {
      db = await openDb(kind);
      await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
      store = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
      await db.query(`CREATE TABLE "${db.schema}".stock_view (sku text PRIMARY KEY, quantity int NOT NULL, version bigint NOT NULL)`);
      await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL, note text)`);
    });
    after(async () => {
      await db.close();
    });

    it('applies an event delivered three times exactly once', async () => {
      const inbox = createInbox({ store, consumer: 'once' });
      inbox.on(StockChanged, async (event, tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects (event_id, note) VALUES ($1, 'applied')`, [event.id]);
      });
      const e = stockEvent('a', 1, 5);
      const outcomes = [];
      for (let i = 0; i < 3; i++) outcomes.push((await inbox.process(e)).status);
      assert.deepEqual(outcomes, ['processed', 'duplicate', 'duplicate']);
      const rows = await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [e.id]);
      assert.equal(rows.length, 1);
      if (kind === 'postgres') {
        const e2 = stockEvent('b', 1, 5);
        const concurrent = await Promise.all(Array.from({ length: 5 }, () => inbox.process(e2)));
        assert.equal(concurrent.filter((o) => o.status === 'processed').length, 1, 'concurrent redeliveries: one effect');
        assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [e2.id])).length, 1);
      }
    });

    it('a failing handler rolls back its writes, retries with backoff, then goes dead while other keys flow; an operator retry runs it again', async () => {
      let broken = true;
      const inbox = createInbox({ store, consumer: 'poison', retry: { baseDelayMs: 10, maxDelayMs: 100, maxAttempts: 3 }, autoStart: false }); // the test runs redrive() itself
      inbox.on(StockChanged, async (event, tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects (event_id, note) VALUES ($1, 'poison')`, [event.id]);
        if (broken && event.aggregateId === 'poison') throw new Error('cannot reserve stock');
      });
      const poison = stockEvent('poison', 1, 1);
      const seen: string[] = [];
      for (let attempt = 1; attempt <= 3; attempt++) {
        seen.push((await inbox.process(poison)).status);
        assert.equal((await inbox.process(stockEvent(`ok${attempt}`, 1, 1))).status, 'processed', 'other keys keep flowing');
      }
      assert.deepEqual(seen, ['retry', 'retry', 'dead']);
      assert.equal((await inbox.process(poison)).status, 'duplicate', 'a dead event is acked on redelivery without running');
      const effects = await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [poison.id]);
      assert.equal(effects.length, 0, "the failed attempts' writes were rolled back");
      const admin = new PostgresInboxAdmin(db.connection, { schema: db.schema });
      const dead = await admin.listDead({ consumer: 'poison' });
      assert.equal(dead.length, 1);
      assert.equal(dead[0]!.attempts, 3);
      assert.match(dead[0]!.lastError ?? '', /cannot reserve stock/);
      broken = false;
      assert.deepEqual(await admin.retryDead({ ids: [poison.id] }, 'test'), [poison.id]);
      assert.equal(await inbox.redrive(), 1);
      assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [poison.id])).length, 1);
      const status = (await admin.status()).find((s) => s.consumer === 'poison')!;
      assert.equal(status.dead, 0);
      assert.equal(status.processed, 4);
    });

    it('groups concurrent events of different keys into one transaction; a failing handler fails alone', async () => {
      const inbox = createInbox({ store, consumer: 'batch', retry: { baseDelayMs: 10, maxDelayMs: 20, maxAttempts: 5 } });
      const txs = new Set<string>();
      inbox.on(StockChanged, async (event, tx) => {
        const { rows } = await tx.query('SELECT txid_current()::text AS x');
        txs.add((rows[0] as { x: string }).x);
        await tx.query(`INSERT INTO "${db.schema}".effects (event_id, note) VALUES ($1, 'batch')`, [event.id]);
        if (event.aggregateId === 'bad') throw new Error('bad sku');
      });
      const events = Array.from({ length: 40 }, (_, i) => stockEvent(`k${i}`, 1, i));
      const first = await Promise.all(events.slice(0, 20).map((e) => inbox.process(e)));
      assert.ok(first.every((o) => o.status === 'processed'));
      assert.ok(txs.size < 20, `20 concurrent events shared transactions (${txs.size})`);
      const bad = stockEvent('bad', 1, 0);
      const outcomes = await Promise.all([...events.slice(20), bad].map((e) => inbox.process(e)));
      assert.deepEqual(outcomes.slice(0, 20).map((o) => o.status), events.slice(20).map(() => 'processed'));
      assert.equal(outcomes[20]!.status, 'retry');
      const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE note = 'batch'`);
      assert.equal(rows[0]!.n, 40, 'every good event applied once; the bad one rolled back');
      const again = await Promise.all(events.map((e) => inbox.process(e)));
      assert.ok(again.every((o) => o.status === 'duplicate'));
    });

    it('guards projections by version: stale events are skipped, a gap is detected and held until the missing version arrives', async () => {
      const inbox = createInbox({ store, consumer: 'projection' });
      const results: string[] = [];
      inbox.on(StockChanged, async (event, tx) => {
        const r = await applyVersioned(tx, {
          table: `${db.schema}.stock_view`,
          id: { sku: event.aggregateId },
          version: event.version!,
          values: { quantity: event.payload.quantity },
          onGap: 'hold',
        });
        results.push(`${event.version}:${r.status}`);
      });
      const v1 = stockEvent('sku1', 1, 10);
      const v2 = stockEvent('sku1', 2, 20);
      const v3 = stockEvent('sku1', 3, 30);
      assert.equal((await inbox.process(v1)).status, 'processed');
      assert.equal((await inbox.process(v3)).status, 'held', 'v3 waits for v2');
      let [row] = await db.query<{ quantity: number; version: string }>(`SELECT quantity, version FROM "${db.schema}".stock_view WHERE sku = 'sku1'`);
      assert.equal(row!.quantity, 10);
      assert.equal((await inbox.process(v2)).status, 'processed');
      [row] = await db.query<{ quantity: number; version: string }>(`SELECT quantity, version FROM "${db.schema}".stock_view WHERE sku = 'sku1'`);
      assert.deepEqual([row!.quantity, Number(row!.version)], [30, 3], 'v2 then the held v3 applied');
      assert.equal((await inbox.process(stockEvent('sku1', 2, 99))).status, 'processed', 'an old version with a new id runs');
      assert.ok(results.includes('2:stale'));
      [row] = await db.query<{ quantity: number; version: string }>(`SELECT quantity, version FROM "${db.schema}".stock_view WHERE sku = 'sku1'`);
      assert.equal(row!.quantity, 30, 'but changes nothing');

      const report = createInbox({ store, consumer: 'report' });
      const gaps: unknown[] = [];
      report.on(StockChanged, async (event, tx) => {
        gaps.push(await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: event.aggregateId }, version: event.version!, values: { quantity: 1 } }));
      });
      await report.process(stockEvent('sku9', 4, 1));
      assert.deepEqual(gaps[0], { status: 'gap', stored: null, missing: [1, 3] });
    });
  });
}

describe('inbox claim on a node-postgres pool', () => {
  it('is planned on every call, never kept as a prepared statement whose plan was made on an empty table', async () => {
    const { pgConnection } = await import('txbox/postgres');
    const { DATABASE_URL } = await import('../helpers/databases.ts');
    const db = await openDb('postgres');
    // One connection, so pg_prepared_statements shows what the inbox left on it.
    const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 1 });
    try {
      await migrateInbox(connection, inboxNames({ schema: db.schema }));
      // A fresh deploy, a truncate or a vacuum of an emptied table: the planner sees no rows, so a generic
      // plan would check each claimed key for held events with a sequential scan of the whole inbox.
      await connection.query(`VACUUM ANALYZE "${db.schema}".inbox`);
      const generic = await connection.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN SELECT EXISTS (SELECT 1 FROM "${db.schema}".inbox h WHERE h.consumer = 'c' AND h.key = 'k' AND h.status = 'held')`,
      );
      assert.match(generic.rows.map((r) => r['QUERY PLAN']).join('\n'), /Seq Scan/, 'precondition: the planner picks a sequential scan on the empty table');
      const inbox = createInbox({ store: new PostgresInboxStore({ connection, schema: db.schema }), consumer: 'planned' });
      inbox.on(StockChanged, () => {});
      for (let round = 0; round < 8; round++) {
        const outcomes = await Promise.all(Array.from({ length: 5 }, (_, i) => inbox.process(stockEvent(`p${i}`, round + 1, round))));
        assert.ok(outcomes.every((o) => o.status === 'processed'));
      }
      const { rows } = await connection.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE '%jsonb_to_recordset%'`);
      assert.equal(rows[0]!.n, 0, 'the claim is not a prepared statement');
      await connection.query(`INSERT INTO "${db.schema}".inbox (consumer, event_id, type, key, version, status) SELECT 'planned', gen_random_uuid(), 't', 'k' || (i % 200), i, 'processed' FROM generate_series(1, 20000) i`);
      const planned = await connection.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN SELECT EXISTS (SELECT 1 FROM "${db.schema}".inbox h WHERE h.consumer = 'planned' AND h.key = 'k1' AND h.status = 'held')`,
      );
      assert.doesNotMatch(planned.rows.map((r) => r['QUERY PLAN']).join('\n'), /Seq Scan/, 'planned per call, the same check uses the index once the table has rows');
    } finally {
      await connection.close();
      await db.close();
    }
  });
});
