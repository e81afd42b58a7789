/**
 * A handler that never returns (an await on a call without a timeout) on
 * PostgreSQL, PGlite and MariaDB. Before 28 Nov 2026 it kept its group-commit
 * transaction open for good: the other keys' events in that transaction never
 * settled, and two such handlers took both transactions and stopped the inbox.
 * Now a handler past `handlerTimeoutMs` fails its attempt (`retry`, then
 * `dead`); the transaction is abandoned and its connection discarded, so the
 * hung handler cannot write through it later, and the other events commit.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mysql from 'mysql2/promise';
import { ConfigError, createInbox, HandlerTimeoutError, uuidv7, type InboxOutcome, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox } from 'txbox/postgres';
import type { MysqlInboxStore } from 'txbox/mysql';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';
import { openMysqlInbox } from '../helpers/mysql-conformance.ts';

function event(key: string): OutboxEvent {
  return { id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: key, key: `Note:${key}`, destination: 'notes', payload: { key }, headers: {}, occurredAt: new Date(), version: null };
}

interface Backend {
  readonly store: PostgresInboxStore | MysqlInboxStore;
  /** Writes a note through the handler's transaction. */
  note(tx: unknown, key: string): Promise<unknown>;
  notes(): Promise<string[]>;
}

/** The scenario on one store: hung handlers among ordinary ones, all submitted at once. */
function scenario(name: string, open: () => Promise<Backend & { close(): Promise<void> }>): void {
  describe(`inbox handler timeout on ${name}`, () => {
    let b: Backend & { close(): Promise<void> };
    before(async () => {
      b = await open();
    });
    after(async () => {
      await b.close();
    });

    for (const maxSize of [1, 64]) {
      it(`two handlers that never return: the others commit, the hung ones retry then dead, and their late writes go nowhere (batch ${maxSize})`, async () => {
        const hung: unknown[] = [];
        const inbox = createInbox({
          store: b.store as PostgresInboxStore,
          consumer: `timeout-${maxSize}`,
          autoStart: false,
          handlerTimeoutMs: 300,
          batch: { maxSize },
          retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 },
        });
        inbox.on('Noted', async (e, tx) => {
          const key = (e.payload as { key: string }).key;
          if (key.startsWith('hang')) {
            hung.push(tx);
            await new Promise(() => {}); // never
          }
          await b.note(tx, `${key}-${maxSize}`);
        });
        const events = ['hang1', 'a', 'hang2', 'b', 'c', 'd'].map(event);
        const started = Date.now();
        const first = await Promise.all(events.map((e) => inbox.process(e)));
        assert.ok(Date.now() - started < 5000, `settled in ${Date.now() - started} ms`);
        const status = (o: InboxOutcome) => o.status;
        assert.deepEqual(first.map(status), ['retry', 'processed', 'retry', 'processed', 'processed', 'processed']);
        assert.match((first[0] as { error: string }).error, /handler did not finish within 300 ms \(handlerTimeoutMs\)/);
        const second = await Promise.all([events[0]!, events[2]!].map((e) => inbox.process(e)));
        assert.deepEqual(second.map(status), ['dead', 'dead']);
        // The hung handlers' transactions are gone: writing through them now fails, and nothing of theirs lands.
        for (const tx of hung) await assert.rejects(b.note(tx, `late-${maxSize}`));
        const notes = await b.notes();
        assert.deepEqual(notes.filter((n) => n.endsWith(`-${maxSize}`)).sort(), ['a', 'b', 'c', 'd'].map((k) => `${k}-${maxSize}`));
        // The store still works (discarded connections replaced).
        assert.equal((await inbox.process(event(`after-${maxSize}`))).status, 'processed');
      });
    }

    it('handlerTimeoutMs is checked', () => {
      for (const bad of [-1, 1.5, Number.NaN, '10' as never]) {
        assert.throws(() => createInbox({ store: b.store as PostgresInboxStore, consumer: 'x', handlerTimeoutMs: bad }), (err: unknown) => err instanceof ConfigError && /handlerTimeoutMs/.test(err.message));
      }
      assert.ok(new HandlerTimeoutError(5) instanceof Error);
    });
  });
}

for (const kind of BACKENDS) {
  scenario(kind, async () => {
    const db: TestDb = await openDb(kind);
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await db.query(`CREATE TABLE "${db.schema}".notes (body text NOT NULL)`);
    return {
      store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }),
      note: (tx, key) => (tx as { query(t: string, p: unknown[]): Promise<unknown> }).query(`INSERT INTO "${db.schema}".notes (body) VALUES ($1)`, [key]),
      notes: async () => (await db.query<{ body: string }>(`SELECT body FROM "${db.schema}".notes`)).map((r) => r.body),
      close: () => db.close(),
    };
  });
}

scenario('mariadb', async () => {
  const m = await openMysqlInbox('timeout');
  await m.pool.query('CREATE TABLE notes (body VARCHAR(100) NOT NULL) ENGINE = InnoDB');
  return {
    store: m.store,
    note: (tx, key) => (tx as mysql.PoolConnection).query('INSERT INTO notes (body) VALUES (?)', [key]),
    notes: async () => ((await m.pool.query('SELECT body FROM notes'))[0] as { body: string }[]).map((r) => r.body),
    close: m.close,
  };
});
