/**
 * The inbox behind the webhook consumer (bad signatures and malformed bodies
 * never reach it) and the inbox worker mode (receive fast, handle later by
 * bucket, per-key order, slow handlers do not slow receiving).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, InboxQueue, createInboxWorker, uuidv7, type OutboxEvent } from 'txbox';
import { HttpTransport, createWebhookConsumer, generateWebhookSecret, signWebhook } from 'txbox/http';
import { PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, inboxNames, migrateInbox, migratePostgres, postgresNames } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

let db: TestDb;
before(async () => {
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL, key text NOT NULL, at timestamptz DEFAULT clock_timestamp())`);
});
after(async () => {
  await db.close();
});

const ev = (key: string, n: number): OutboxEvent => ({
  id: uuidv7(),
  type: 'Changed',
  aggregateType: 'Item',
  aggregateId: key,
  key: `Item:${key}`,
  destination: 'items',
  payload: { n },
  headers: {},
  occurredAt: new Date(),
  version: n,
});

it('webhook consumer: signed deliveries applied once; bad signatures and malformed bodies rejected without touching the inbox', async () => {
  const secret = generateWebhookSecret();
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'http' });
  inbox.on('Changed', async (event, tx) => {
    await tx.query(`INSERT INTO "${db.schema}".effects (event_id, key) VALUES ($1, $2)`, [event.id, event.key]);
  });
  const server = await createWebhookConsumer({ inbox, secret }).listen({ port: 0 });
  const transport = new HttpTransport({ endpoints: { items: `${server.url.replace(/\/$/, '')}/items` }, secret });
  try {
    const e = ev('h1', 1);
    for (let i = 0; i < 3; i++) {
      const [o] = await transport.publish([e], AbortSignal.timeout(5000));
      assert.equal(o!.ok, true);
    }
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects WHERE event_id = $1`, [e.id])).length, 1);

    const body = JSON.stringify(ev('h2', 1));
    const ts = Math.floor(Date.now() / 1000);
    const wrong = await fetch(`${server.url.replace(/\/$/, '')}/items`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'webhook-id': 'x', 'webhook-timestamp': String(ts), 'webhook-signature': signWebhook(generateWebhookSecret(), 'x', ts, body) },
      body,
    });
    assert.equal(wrong.status, 401);
    const bad = '{"id": "not json';
    const malformed = await fetch(`${server.url.replace(/\/$/, '')}/items`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'webhook-id': 'y', 'webhook-timestamp': String(ts), 'webhook-signature': signWebhook(secret, 'y', ts, bad) },
      body: bad,
    });
    assert.equal(malformed.status, 400);
    const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE consumer = 'http'`);
    assert.equal(rows[0]!.n, 1, 'only the good event is in the inbox');
  } finally {
    await transport.close();
    await server.close();
  }
});

it('worker mode: receiving only queues (fast, duplicates ignored); workers run handlers by bucket in per-key order', async () => {
  const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'worker' });
  const applied: { id: string; key: string }[] = [];
  inbox.on('Changed', async (event, tx) => {
    await new Promise((r) => setTimeout(r, 5)); // a slow handler
    await tx.query(`INSERT INTO "${db.schema}".effects (event_id, key) VALUES ($1, $2)`, [event.id, event.key]);
    applied.push({ id: event.id, key: event.key });
  });
  const committed = new Map<string, string[]>();
  const events: OutboxEvent[] = [];
  for (let n = 1; n <= 10; n++) {
    for (let k = 0; k < 20; k++) {
      const e = ev(`w${k}`, n);
      events.push(e);
      committed.set(e.key, [...(committed.get(e.key) ?? []), e.id]);
    }
  }
  for (let i = 0; i < events.length; i += 50) await queue.receive(events.slice(i, i + 50));
  await queue.receive(events.slice(0, 30)); // redeliveries
  assert.equal(applied.length, 0, 'receiving ran no handler');

  const workers = [0, 1].map(() =>
    createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30, leaseTtlMs: 3000 }),
  );
  for (const w of workers) await w.start();
  try {
    await waitFor('all handled', () => applied.length >= 200, 60_000);
  } finally {
    for (const w of workers) await w.stop();
  }
  const report = checkDeliveries(committed, applied);
  assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
});

it('worker mode: a failing handler stores the event envelope once, without the stored payload text', async () => {
  const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'failing' });
  inbox.on('Changed', async () => {
    throw new Error('handler bug');
  });
  const e = ev('fails', 1);
  await queue.receive([e]);
  const worker = createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30, leaseTtlMs: 3000 });
  await worker.start();
  let envelope: Record<string, unknown> | undefined;
  try {
    await waitFor('the failure recorded', async () => {
      const rows = await db.query<{ envelope: Record<string, unknown> | null }>(`SELECT envelope FROM "${db.schema}".inbox WHERE consumer = 'failing' AND event_id = $1`, [e.id]);
      envelope = rows[0]?.envelope ?? undefined;
      return envelope !== undefined;
    }, 10_000);
  } finally {
    await worker.stop();
  }
  assert.deepEqual(envelope!['payload'], { n: 1 });
  assert.equal('payloadJson' in envelope!, false);
});
