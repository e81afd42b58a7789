/**
 * An inbox whose database connections go silent (see relay-db-silent.test.ts
 * for the relay): a proxy stops forwarding on every open connection without
 * closing them; new connections work. Without a bound, an event whose
 * transaction began on such a connection waits until TCP gives up (~15
 * minutes), its key's later events behind it, and a pool whose every
 * connection went silent holds the whole consumer. The inbox store bounds
 * each transaction (the handlers' timeout plus `statementTimeoutMs`) and its
 * other statements, drops those connections and goes on over new ones.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createInbox, uuidv7, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox, pgConnection, PostgresInboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { processAfterSilence } from '../helpers/outage.ts';

let db: TestDb;
let proxy: TcpProxy;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid PRIMARY KEY)`);
  proxy = await startTcpProxy(Number(new URL(DATABASE_URL).port || 5432), new URL(DATABASE_URL).hostname);
});
after(async () => {
  await proxy.close().catch(() => {});
  await db.close();
});

const event = (key: string): OutboxEvent => ({
  id: uuidv7(),
  type: 'Noted',
  aggregateType: 'Note',
  aggregateId: key,
  key: `Note:${key}`,
  destination: 'notes',
  payload: {},
  headers: {},
  occurredAt: new Date(),
  version: null,
});

it('processes again over new connections when every open one goes silent', { timeout: 60_000 }, async () => {
  const url = new URL(DATABASE_URL);
  url.port = String(proxy.port);
  url.searchParams.set('application_name', `txbox-inbox-silent-${randomBytes(3).toString('hex')}`);
  const connection = pgConnection({ connectionString: url.toString(), maxConnections: 2 });
  const inbox = createInbox({ store: new PostgresInboxStore({ connection, schema: db.schema, statementTimeoutMs: 1000 }), consumer: 'silent', handlerTimeoutMs: 1000, autoStart: false });
  inbox.on('Noted', async (e, tx) => void (await tx.query(`INSERT INTO "${db.schema}".effects (event_id) VALUES ($1)`, [e.id])));
  try {
    const e = event('c');
    const took = await processAfterSilence(proxy, inbox, [event('a'), event('b')], e);
    assert.ok(took < 15_000, `took ${Math.round(took)} ms`);
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [e.id])).length, 1);
  } finally {
    await connection.close();
  }
});
