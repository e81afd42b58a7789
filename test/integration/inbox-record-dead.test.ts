/**
 * `Inbox.recordDead` on PostgreSQL, PGlite and MariaDB: what a consumer calls
 * when it gives up on a message without handling it (NATS, Redis: delivered
 * `maxDeliveries` times without an ack). The event becomes a `dead` row with
 * the reason, so `txbox inbox dead` lists it and can run it again; a later
 * delivery of it is a duplicate; an event already processed stays processed;
 * an event without a handler records nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox } from 'txbox/postgres';
import type { MysqlInboxStore } from 'txbox/mysql';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';
import { openMysqlInbox } from '../helpers/mysql-conformance.ts';

function event(type = 'Noted'): OutboxEvent {
  return { id: uuidv7(), type, aggregateType: 'Note', aggregateId: 'n1', key: 'Note:n1', destination: 'notes', payload: { n: 1 }, headers: {}, occurredAt: new Date(), version: null };
}

interface Backend {
  readonly store: PostgresInboxStore | MysqlInboxStore;
  /** The consumer's inbox rows. */
  rows(consumer: string): Promise<{ status: string; attempts: number; last_error: string | null }[]>;
  close(): Promise<void>;
}

const REASON = 'delivered 12 times without an ack (maxDeliveries 12); the handler did not run again';

function scenario(name: string, open: () => Promise<Backend>): void {
  describe(`Inbox.recordDead on ${name}`, () => {
    let b: Backend;
    before(async () => {
      b = await open();
    });
    after(async () => {
      await b.close();
    });

    function inboxFor(consumer: string) {
      const runs: string[] = [];
      const failed: { id: string; dead: boolean; error: string }[] = [];
      const inbox = createInbox({ store: b.store as PostgresInboxStore, consumer, autoStart: false });
      inbox.on('Noted', async (e) => void runs.push(e.id));
      inbox.events.on('failed', (f) => failed.push({ id: f.id, dead: f.dead, error: f.error }));
      return { inbox, runs, failed };
    }

    it('a new event becomes a dead row with the reason; a later delivery of it is a duplicate and does not run the handler', async () => {
      const { inbox, runs, failed } = inboxFor('fresh');
      const e = event();
      await inbox.recordDead(e, REASON);
      assert.deepEqual(await b.rows('fresh'), [{ status: 'dead', attempts: 1, last_error: REASON }]);
      assert.deepEqual(failed, [{ id: e.id, dead: true, error: REASON }]);
      assert.deepEqual(await inbox.process(e), { status: 'duplicate' });
      assert.deepEqual(runs, []);
    });

    it('an event whose attempt failed before becomes dead, its attempts kept', async () => {
      const inbox = createInbox({ store: b.store as PostgresInboxStore, consumer: 'failed-before', autoStart: false });
      const e = event();
      inbox.on('Noted', async () => {
        throw new Error('boom');
      });
      assert.equal((await inbox.process(e)).status, 'retry');
      await inbox.recordDead(e, REASON);
      assert.deepEqual(await b.rows('failed-before'), [{ status: 'dead', attempts: 2, last_error: REASON }]);
    });

    it('an event already processed stays processed; one without a handler records nothing', async () => {
      const { inbox, failed } = inboxFor('done');
      const e = event();
      assert.equal((await inbox.process(e)).status, 'processed');
      await inbox.recordDead(e, REASON);
      await inbox.recordDead(event('NoHandler'), REASON);
      assert.deepEqual(
        (await b.rows('done')).map((r) => r.status),
        ['processed'],
      );
      assert.deepEqual(failed, []);
    });
  });
}

for (const kind of BACKENDS) {
  scenario(kind, async () => {
    const db: TestDb = await openDb(kind);
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    return {
      store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }),
      rows: (consumer) => db.query(`SELECT status, attempts, last_error FROM "${db.schema}".inbox WHERE consumer = $1`, [consumer]),
      close: () => db.close(),
    };
  });
}

scenario('mariadb', async () => {
  const m = await openMysqlInbox('recdead');
  return {
    store: m.store,
    rows: async (consumer) => (await m.pool.query('SELECT status, attempts, last_error FROM inbox WHERE consumer = ?', [consumer]))[0] as never,
    close: m.close,
  };
});
