/**
 * applyVersioned reports what it wrote (issue 11 item 10): a row whose
 * version column is NULL ("never versioned") counts as version 0, so the
 * event applies (or is a gap from 0, or is held), and the result always
 * matches the row; it never says `applied` when nothing was written.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, HoldEvent, uuidv7, type OutboxEvent } from 'txbox';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

for (const kind of BACKENDS) {
  describe(`applyVersioned on ${kind}`, () => {
    let db: TestDb;
    let table: string;
    before(async () => {
      db = await openDb(kind, { migrate: false });
      await db.query(`CREATE SCHEMA IF NOT EXISTS "${db.schema}"`);
      table = `${db.schema}.view`;
      await db.query(`CREATE TABLE "${db.schema}".view (id text PRIMARY KEY, quantity int, version bigint)`);
    });
    after(async () => {
      await db.close();
    });

    const row = async (id: string) => (await db.query<{ quantity: number; version: string | null }>(`SELECT quantity, version::text AS version FROM "${db.schema}".view WHERE id = $1`, [id]))[0];
    const apply = (id: string, version: number, quantity: number, onGap: 'apply' | 'hold' = 'apply') =>
      db.transaction((tx) => applyVersioned(tx, { table, id: { id }, version, values: { quantity }, onGap, prepare: false }));

    it('a row with a NULL version is "never versioned": version 1 applies and the result says so', async () => {
      await db.query(`INSERT INTO "${db.schema}".view (id, quantity, version) VALUES ('n1', 1, NULL)`);
      const result = await apply('n1', 1, 5);
      assert.deepEqual(result, { status: 'applied', previous: null });
      assert.deepEqual(await row('n1'), { quantity: 5, version: '1' }, 'applied means written');
      assert.deepEqual(await apply('n1', 1, 6), { status: 'stale', stored: 1 });
      assert.deepEqual(await row('n1'), { quantity: 5, version: '1' });
    });

    it('a NULL version and a later event: a gap from 0, applied and reported, or held', async () => {
      await db.query(`INSERT INTO "${db.schema}".view (id, quantity, version) VALUES ('n2', 1, NULL), ('n3', 1, NULL)`);
      assert.deepEqual(await apply('n2', 3, 7), { status: 'gap', stored: null, missing: [1, 2] });
      assert.deepEqual(await row('n2'), { quantity: 7, version: '3' });
      await assert.rejects(apply('n3', 3, 7, 'hold'), (err: unknown) => err instanceof HoldEvent && /waits for version 1/.test(err.message));
      assert.deepEqual(await row('n3'), { quantity: 1, version: null }, 'held: nothing written');
      assert.deepEqual(await apply('n3', 1, 8, 'hold'), { status: 'applied', previous: null });
      assert.deepEqual(await row('n3'), { quantity: 8, version: '1' });
    });

    it('new rows, next versions and stale ones as before', async () => {
      assert.deepEqual(await apply('r', 1, 1), { status: 'applied', previous: null });
      assert.deepEqual(await apply('r', 2, 2), { status: 'applied', previous: 1 });
      assert.deepEqual(await apply('r', 2, 3), { status: 'stale', stored: 2 });
      assert.deepEqual(await apply('r', 5, 5), { status: 'gap', stored: 2, missing: [3, 4] });
      assert.deepEqual(await row('r'), { quantity: 5, version: '5' });
    });

    it('an event whose version is 0, fractional or missing is dead at once through the inbox, naming the version; other events flow', async () => {
      await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
      const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'bad-versions', autoStart: false });
      inbox.on('QuantitySet', async (e, tx) => {
        await applyVersioned(tx, { table, id: { id: e.aggregateId }, version: e.version!, values: { quantity: 1 } });
      });
      const ev = (id: string, version: number | null): OutboxEvent => ({ id: uuidv7(), type: 'QuantitySet', aggregateType: 'V', aggregateId: id, key: `V:${id}`, destination: 'v', payload: {}, headers: {}, occurredAt: new Date(), version });
      const outcomes = await Promise.all([ev('b0', 0), ev('b1', 1.5), ev('b2', null), ev('ok', 1)].map((e) => inbox.process(e)));
      assert.deepEqual(outcomes.map((o) => o.status), ['dead', 'dead', 'dead', 'processed']);
      for (const o of outcomes.slice(0, 3)) assert.match((o as { error: string }).error, /^version: must be/);
      assert.deepEqual((outcomes[0] as { attempts: number }).attempts, 1);
    });
  });
}
