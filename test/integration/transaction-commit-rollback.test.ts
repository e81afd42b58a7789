/**
 * A transaction txbox runs (the inbox's handler transactions, `outbox.transaction`,
 * the admin commands) whose statement failed and was caught inside it is in
 * PostgreSQL's aborted state: COMMIT then answers ROLLBACK, without an error.
 * The connection's `transaction()` must reject then, or a caller takes rolled
 * back work for committed: the inbox acked a whole group-commit batch whose
 * handlers' writes and inbox rows were gone. On PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, migrateInbox, inboxNames } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

function changed(aggregateId: string, n: number): OutboxEvent {
  return { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId, key: `Item:${aggregateId}`, destination: 'items', payload: { n }, headers: {}, occurredAt: new Date(), version: null };
}

for (const kind of BACKENDS) {
  describe(`a transaction rolled back at COMMIT on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
      await db.query(`CREATE TABLE "${db.schema}".taken (k text PRIMARY KEY)`);
      await db.query(`INSERT INTO "${db.schema}".taken VALUES ('x')`);
      await db.query(`CREATE TABLE "${db.schema}".effects (id text PRIMARY KEY)`);
    });
    after(async () => {
      await db.close();
    });

    it('transaction() rejects when a caught failure left the transaction aborted, and nothing of it is committed', async () => {
      await assert.rejects(
        db.connection.transaction(async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".effects VALUES ('kept?')`);
          await tx.query(`INSERT INTO "${db.schema}".taken VALUES ('x')`).catch(() => {}); // "already there: fine"
        }),
        /rolled back/,
      );
      assert.deepEqual(await db.query(`SELECT id FROM "${db.schema}".effects`), []);
    });

    it('the inbox does not report a batch processed that PostgreSQL rolled back', async () => {
      const names = inboxNames({ schema: db.schema });
      await migrateInbox(db.connection, names);
      const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'c', autoStart: false, batch: { maxSize: 16, concurrency: 1 } });
      inbox.on('Changed', async (e, tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1)`, [e.id]);
        if (e.aggregateId === 'swallows') await tx.query(`INSERT INTO "${db.schema}".taken VALUES ('x')`).catch(() => {});
      });
      const events = ['a', 'b', 'c', 'swallows'].map((id, i) => changed(id, i));
      const outcomes = await Promise.all(events.map((e) => inbox.process(e).catch((err: Error) => ({ status: `threw: ${err.message}` }))));
      const effects = (await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".effects`)).map((r) => r.id);
      for (let i = 0; i < events.length; i++) {
        const status = (outcomes[i] as { status: string }).status;
        if (status === 'processed') assert.ok(effects.includes(events[i]!.id), `event ${events[i]!.aggregateId} reported processed, but its write is not committed`);
      }
      assert.ok(effects.length >= 3, `the other events' writes are committed: ${effects.length}`);
      await inbox.stop?.();
    });
  });
}
