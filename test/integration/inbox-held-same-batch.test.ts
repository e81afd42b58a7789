/**
 * A held event and its missing version in one inbox transaction (a key's run
 * out of order, `processInOrder([v3, v2])`, or both in one group commit):
 * v3 is held in its savepoint, v2 applied after it, both commit together.
 * The held event must run before the callers hear back, as when the missing
 * version comes in a transaction of its own; before 28 Nov 2026 it waited
 * for the held re-check (30 s by default), and the key's next versions were
 * held behind it meanwhile. On PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox } from 'txbox';
import { applyVersioned, PostgresInboxStore } from 'txbox/postgres';
import { BACKENDS, type TestDb } from '../helpers/databases.ts';
import { openStockDb, stockChanged } from '../helpers/inbox-stock.ts';


for (const kind of BACKENDS) {
  describe(`inbox: a hold and its missing version in one transaction, on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openStockDb(kind);
    });
    after(async () => {
      await db.close();
    });

    it('processInOrder([v3, v2]) after v1: v3 runs before the outcomes resolve, and v4 applies at once', async () => {
      const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'c', autoStart: false });
      inbox.on('StockChanged', async (e, tx) => {
        await applyVersioned(tx, { table: `${db.schema}.stock_view`, id: { sku: e.aggregateId }, version: e.version!, values: { quantity: (e.payload as { quantity: number }).quantity }, onGap: 'hold' });
      });
      assert.equal((await inbox.process(stockChanged('a', 1, 1))).status, 'processed');
      const outcomes = await Promise.all(inbox.processInOrder([stockChanged('a', 3, 3), stockChanged('a', 2, 2)]));
      assert.deepEqual(outcomes.map((o) => o.status), ['held', 'processed']);
      const view = async () => Number((await db.query<{ version: string }>(`SELECT version FROM "${db.schema}".stock_view`))[0]!.version);
      assert.equal(await view(), 3, 'v3 released before the outcomes resolved');
      assert.equal((await inbox.process(stockChanged('a', 4, 4))).status, 'processed');
      assert.equal(await view(), 4);
    });
  });
}
