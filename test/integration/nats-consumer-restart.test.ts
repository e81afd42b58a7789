/**
 * NatsConsumer across a nats-server restart (SIGKILL, then the same command
 * again) in the middle of consuming: nats.js reconnects, the pull resumes
 * without a new start(), and every event is applied exactly once. The server
 * is one of the test's own (a copy of the binary on a free port, file
 * storage in a temp directory), so other test files using 127.0.0.1:4222
 * are not disturbed. Redeliveries after the restart may come after later
 * events of their key; the projection's version guard (`onGap: 'hold'`)
 * keeps its final state right regardless.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createInbox } from 'txbox';
import { NatsConsumer, type NatsConsumerEvents } from 'txbox/nats';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { itemRounds, JetStreamAdmin, PrivateNatsServer, publishAll, sleep, type TestStreams } from '../fixtures/nats-consumer-helpers.ts';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const KEYS = 30;
const PER_KEY = 20;
let db: TestDb;
let server: PrivateNatsServer;
let admin: JetStreamAdmin;
let s: TestStreams;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL)`);
  await db.query(`CREATE TABLE "${db.schema}".items (key text PRIMARY KEY, n int NOT NULL, version int NOT NULL)`);
  server = await PrivateNatsServer.create();
  admin = await JetStreamAdmin.open(server.servers);
  s = await admin.streams();
});
after(async () => {
  await s.delete();
  await admin.close();
  await server.destroy();
  await db.close();
});

it('keeps consuming across a server restart: nothing lost, nothing applied twice', { timeout: 120_000 }, async (t) => {
  const { rounds, committed } = itemRounds('r', KEYS, PER_KEY);
  const transport = s.transport();
  await transport.start();
  await publishAll(transport, rounds);
  await transport.close();

  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'restart' });
  inbox.on('ItemChanged', async (event, tx) => {
    await sleep(3);
    await tx.query(`INSERT INTO "${db.schema}".effects (event_id, key) VALUES ($1, $2)`, [event.id, event.key]);
    const n = (event.payload as { n: number }).n;
    await applyVersioned(tx, { table: `${db.schema}.items`, id: { key: event.key }, version: event.version!, values: { n }, onGap: 'hold' });
  });
  const consumer = new NatsConsumer({ servers: server.servers, stream: s.stream, durable: 'restart', inbox, concurrency: 8, batch: 50, ackWaitMs: 2000, reconnectTimeWaitMs: 100 });
  const connection: NatsConsumerEvents['connection']['status'][] = [];
  consumer.events.on('connection', (c) => connection.push(c.status));
  const count = async (): Promise<number> => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects`))[0]!.n;
  await consumer.start();
  try {
    await waitFor('some events applied', async () => (await count()) >= 100, 30_000, 10);
    await server.kill();
    const appliedAtKill = await count();
    await sleep(1000);
    await server.start();
    await waitFor('all events applied after the restart', async () => (await count()) >= KEYS * PER_KEY, 90_000, 100);
    await waitFor('every message acked', async () => {
      const info = await s.consumer('restart');
      return info !== null && info.num_ack_pending === 0 && info.num_pending === 0;
    }, 30_000, 100);
    assert.ok(appliedAtKill < KEYS * PER_KEY, 'the server went down in the middle of consuming');
  } finally {
    await consumer.stop();
  }
  assert.ok(connection.includes('disconnect') && connection.includes('reconnect'), connection.join(','));
  const rows = await db.query<{ id: string; key: string }>(`SELECT event_id AS id, key FROM "${db.schema}".effects ORDER BY seq`);
  const report = checkDeliveries(committed, rows);
  assert.deepEqual([report.lost, report.duplicates, report.phantom], [0, 0, 0], JSON.stringify(report));
  t.diagnostic(`applied ${report.delivered} once each; ${report.orderViolations} applied out of key order (redeliveries after the restart), ${consumer.stats.duplicate} redeliveries skipped by the inbox, ${consumer.stats.held} held by the version guard`);
  const projection = await db.query<{ n: number; version: number }>(`SELECT n, version FROM "${db.schema}".items`);
  assert.equal(projection.length, KEYS);
  assert.ok(
    projection.every((p) => p.n === PER_KEY && p.version === PER_KEY),
    'the projection holds every key at its last version',
  );
});
