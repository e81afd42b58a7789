/**
 * An event whose broker message was acked already (held for a version gap,
 * or dead and retried by an operator) runs again only through the inbox:
 * the release of held events and the redrive. When that run fails, no broker
 * redelivers it. Before 28 Nov 2026 its row turned `failed`, which no timer
 * and no admin command looks at: the event never ran again, and every later
 * version of its key stayed held behind it. Now it is held again (attempts
 * counted, `dead` at maxAttempts), and the held re-check runs it. On
 * PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox } from 'txbox';
import { applyVersioned, PostgresInboxAdmin, PostgresInboxStore } from 'txbox/postgres';
import { BACKENDS, type TestDb } from '../helpers/databases.ts';
import { openStockDb, stockChanged } from '../helpers/inbox-stock.ts';


for (const kind of BACKENDS) {
  describe(`inbox: acked events that fail when run again, on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openStockDb(kind);
    });
    after(async () => {
      await db.close();
    });
    const statuses = async (consumer: string) =>
      (await db.query<{ version: string | null; status: string }>(`SELECT version, status FROM "${db.schema}".inbox WHERE consumer = $1 ORDER BY version`, [consumer])).map((r) => `${r.version}:${r.status}`);

    it('a held event whose release fails once is run again by the re-check, and the later versions follow', async () => {
      const store = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
      const inbox = createInbox({ store, consumer: 'release', heldRecheckIntervalMs: 10, autoStart: false });
      let failOnce = true;
      inbox.on('StockChanged', async (e, tx) => {
        await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: e.aggregateId }, version: e.version!, values: { quantity: (e.payload as { quantity: number }).quantity }, onGap: 'hold' });
        if (e.version === 3 && failOnce) {
          failOnce = false;
          throw new Error('transient: lock timeout');
        }
      });
      assert.equal((await inbox.process(stockChanged('a', 1, 1))).status, 'processed');
      assert.equal((await inbox.process(stockChanged('a', 3, 3))).status, 'held'); // acked to the broker
      assert.equal((await inbox.process(stockChanged('a', 2, 2))).status, 'processed'); // its release of v3 fails once
      assert.equal((await inbox.process(stockChanged('a', 4, 4))).status, 'held');
      await new Promise((r) => setTimeout(r, 30));
      await inbox.recheckHeld();
      assert.deepEqual(await statuses('release'), ['1:processed', '2:processed', '3:processed', '4:processed']);
      const view = await db.query<{ version: string }>(`SELECT version FROM "${db.schema}".stock_view WHERE sku = 'a'`);
      assert.equal(Number(view[0]!.version), 4);
      inbox.stop();
    });

    it("an operator's retry whose run fails once more is not left where nothing runs it", async () => {
      const store = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
      const admin = new PostgresInboxAdmin(db.connection, { schema: db.schema });
      const inbox = createInbox({ store, consumer: 'redrive', heldRecheckIntervalMs: 10, retry: { baseDelayMs: 1, maxDelayMs: 2, maxAttempts: 2 }, autoStart: false });
      let failures = 3;
      inbox.on('StockChanged', async () => {
        if (failures-- > 0) throw new Error('downstream unavailable');
      });
      const e = stockChanged('b', null, 1);
      assert.equal((await inbox.process(e)).status, 'retry');
      assert.equal((await inbox.process(e)).status, 'dead'); // dead-lettered on the broker
      await admin.retryDead({ ids: [e.id] }, 'operator');
      assert.equal(await inbox.redrive(), 1); // fails once more
      await new Promise((r) => setTimeout(r, 30));
      await inbox.redrive();
      await inbox.recheckHeld();
      assert.deepEqual(await statuses('redrive'), ['null:processed']);
      inbox.stop();
    });
  });
}
