/**
 * Held events released on PostgreSQL and PGlite:
 * - a held event is stored as it was received and its payload goes through
 *   the event definition's schema once when it runs (before 28 Nov 2026 the
 *   held row kept the schema's output, and the release validated that again:
 *   a transforming schema dead-lettered the event or applied it transformed
 *   twice);
 * - two aggregates sharing one ordering key: one aggregate's gap does not
 *   keep the other's released events held (the release stopped at the key's
 *   first event still held, whatever its aggregate);
 * - a held row whose type has no handler any more is passed over once, not
 *   read again and again (the release re-read it 1,000 times).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { createInbox, defineEvent, uuidv7, type OutboxEvent } from 'txbox';
import { applyVersioned, PostgresInboxStore } from 'txbox/postgres';
import { BACKENDS, type TestDb } from '../helpers/databases.ts';
import { openStockDb, stockChanged } from '../helpers/inbox-stock.ts';

/** Quantities travel as text and the schema turns them into numbers times 100 (a transform that is wrong when applied twice). */
const StockChanged = defineEvent({
  type: 'StockChanged',
  aggregateType: 'Sku',
  destination: 'stock',
  schema: z.object({ quantity: z.string().transform((s) => Number(s) * 100) }),
});

function textStock(sku: string, version: number, quantity: string): OutboxEvent {
  return { ...stockChanged(sku, version, 0), payload: { quantity } };
}

for (const kind of BACKENDS) {
  describe(`inbox: held events released, on ${kind}`, () => {
    let db: TestDb;
    let n = 0;
    before(async () => {
      db = await openStockDb(kind);
    });
    after(async () => {
      await db.close();
    });
    const store = () => new PostgresInboxStore({ connection: db.connection, schema: db.schema });
    const view = async (sku: string) =>
      (await db.query<{ quantity: number; version: string }>(`SELECT quantity, version::text AS version FROM "${db.schema}".stock_view WHERE sku = $1`, [sku]))[0];

    for (const maxSize of [1, 64]) {
      it(`a held event's payload goes through its schema once (batch ${maxSize})`, async () => {
        const inbox = createInbox({ store: store(), consumer: `schema-once-${maxSize}`, autoStart: false, batch: { maxSize } });
        inbox.on(StockChanged, async (e, tx) => {
          await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: e.aggregateId }, version: e.version!, values: { quantity: e.payload.quantity }, onGap: 'hold' });
        });
        const sku = `schema-${maxSize}`;
        assert.equal((await inbox.process(textStock(sku, 1, '1'))).status, 'processed');
        // v3 together with another key's event (one group-commit transaction with maxSize 64).
        const [v3] = await Promise.all([inbox.process(textStock(sku, 3, '3')), inbox.process(textStock(`${sku}-other`, 1, '9'))]);
        assert.equal(v3.status, 'held');
        assert.equal((await inbox.process(textStock(sku, 2, '2'))).status, 'processed');
        assert.deepEqual(await view(sku), { quantity: 300, version: '3' }, 'v3 applied with its quantity transformed once');
        const rows = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = $1 AND key = $2 ORDER BY version`, [`schema-once-${maxSize}`, `Sku:${sku}`]);
        assert.deepEqual(rows.map((r) => r.status), ['processed', 'processed', 'processed']);
      });
    }

    it("one aggregate's gap does not keep another aggregate of the same key held", async () => {
      const consumer = `shared-key-${++n}`;
      const inbox = createInbox({ store: store(), consumer, autoStart: false, batch: { maxSize: 1 } });
      inbox.on('StockChanged', async (e, tx) => {
        await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: e.aggregateId }, version: e.version!, values: { quantity: (e.payload as { quantity: number }).quantity }, onGap: 'hold' });
      });
      // Two SKUs whose events share one ordering key (a customer's, say); versions are per SKU.
      const key = 'Customer:1';
      const ev = (sku: string, version: number): OutboxEvent => ({ ...stockChanged(sku, version, version), key });
      for (const e of [ev('a', 1), ev('b', 1)]) assert.equal((await inbox.process(e)).status, 'processed');
      assert.equal((await inbox.process(ev('a', 3))).status, 'held', 'a3 waits for a2');
      assert.equal((await inbox.process(ev('b', 3))).status, 'held', 'b3 waits for b2');
      assert.equal((await inbox.process(ev('b', 2))).status, 'processed');
      assert.deepEqual(await view('b'), { quantity: 3, version: '3' }, 'b3 released when b2 applied, though a3 is still held');
      assert.equal((await inbox.process(ev('b', 4))).status, 'processed');
      assert.deepEqual(await view('a'), { quantity: 1, version: '1' }, 'a stays at 1 until a2 comes');
      assert.equal((await inbox.process(ev('a', 2))).status, 'processed');
      assert.deepEqual(await view('a'), { quantity: 3, version: '3' });
    });

    it('a held row whose type has no handler any more is passed over, and later held events of the key still run', async () => {
      const consumer = `no-handler-${++n}`;
      const key = 'Sku:gone';
      const old = createInbox({ store: store(), consumer, autoStart: false, batch: { maxSize: 1 } });
      old.on('OldStockChanged', (e) => {
        throw new (class extends Error {})(`never runs ${e.id}`);
      });
      // A held row of a type this consumer no longer handles (written by an older version of it).
      const stale: OutboxEvent = { id: uuidv7(), type: 'OldStockChanged', aggregateType: 'Sku', aggregateId: 'gone', key, destination: 'stock', payload: {}, headers: {}, occurredAt: new Date(), version: 1 };
      await store().hold(consumer, stale, 'kept by an older consumer');
      let reads = 0;
      const counting = store();
      const redrivable = counting.redrivable.bind(counting);
      counting.redrivable = (...args) => {
        reads++;
        return redrivable(...args);
      };
      const inbox = createInbox({ store: counting, consumer, autoStart: false, batch: { maxSize: 1 } });
      inbox.on('StockChanged', async (e, tx) => {
        await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: e.aggregateId }, version: e.version!, values: { quantity: (e.payload as { quantity: number }).quantity }, onGap: 'hold' });
      });
      assert.equal((await inbox.process(stockChanged('gone', 1, 1))).status, 'processed');
      assert.ok(reads <= 2, `the key's held rows were read ${reads} times`);
      assert.equal((await inbox.process(stockChanged('gone', 3, 3))).status, 'held');
      reads = 0;
      assert.equal((await inbox.process(stockChanged('gone', 2, 2))).status, 'processed');
      assert.deepEqual(await view('gone'), { quantity: 3, version: '3' }, 'v3 released past the stale row');
      assert.ok(reads <= 3, `the key's held rows were read ${reads} times`);
      const rows = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`, [consumer, stale.id]);
      assert.equal(rows[0]!.status, 'held', 'the stale row stays held, for an operator to see');
    });
  });
}
