/**
 * Both sides on MariaDB through `txbox/mysql`: events enqueued in the
 * producer's mysql2 transactions (a rolled-back one included), a relay on
 * MysqlRelayStore posting signed webhooks, and a webhook consumer whose inbox
 * is a MysqlInboxStore with a version-guarded projection. Every committed
 * event's effect lands once, the rolled-back one never, and a replay of the
 * whole destination is all duplicates. Also: a MySQL inbox fits the
 * consumers' `inbox` option (typed `InboxProcessor`).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createInbox, createOutbox, createRelay, defineEvent, payloadType, type InboxProcessor } from 'txbox';
import { HttpTransport, createWebhookConsumer, generateWebhookSecret } from 'txbox/http';
import {
  MysqlAdmin,
  MysqlInboxStore,
  MysqlOutboxStore,
  MysqlRelayStore,
  applyVersioned,
  migrateMysql,
  migrateMysqlInbox,
  mysqlConnection,
  mysqlInboxNames,
  mysqlNames,
  type MysqlConnection,
} from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { waitFor } from '../helpers/wait.ts';

const StockChanged = defineEvent({ type: 'StockChanged', aggregateType: 'Sku', destination: 'stock', payload: payloadType<{ quantity: number }>() });

const database = `txbox_mye2e_${randomBytes(4).toString('hex')}`;
let root: mysql.Connection;
let pool: mysql.Pool;
let connection: MysqlConnection;

before(async () => {
  root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 10, dateStrings: true, timezone: 'Z' });
  connection = await mysqlConnection({ pool });
  await migrateMysql(connection, mysqlNames());
  await migrateMysqlInbox(connection, mysqlInboxNames());
  await pool.query('CREATE TABLE skus (sku VARCHAR(50) PRIMARY KEY, quantity INT NOT NULL, version BIGINT NOT NULL) ENGINE = InnoDB');
  await pool.query('CREATE TABLE stock_view (sku VARCHAR(50) PRIMARY KEY, quantity INT NOT NULL, version BIGINT NOT NULL) ENGINE = InnoDB');
  await pool.query('CREATE TABLE effects (event_id CHAR(36) NOT NULL, sku VARCHAR(50) NOT NULL) ENGINE = InnoDB');
});
after(async () => {
  await pool.end();
  await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await root.end();
});

it('outbox, relay and webhook consumer with a MySQL inbox: each committed event applied once, in version order; a replay is all duplicates', async () => {
  const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [StockChanged] });
  const inbox = createInbox({ store: new MysqlInboxStore({ connection }), consumer: 'stock-view', metrics: false });
  const outcomes: string[] = [];
  inbox.events.on('duplicate', () => void outcomes.push('duplicate'));
  inbox.on(StockChanged, async (event, tx) => {
    await tx.query('INSERT INTO effects (event_id, sku) VALUES (?, ?)', [event.id, event.aggregateId]);
    await applyVersioned(tx, { table: 'stock_view', id: { sku: event.aggregateId }, version: event.version!, values: { quantity: event.payload.quantity }, onGap: 'hold' });
  });
  const fits: InboxProcessor = inbox; // the consumers' option type takes a MySQL inbox
  const secret = generateWebhookSecret();
  const server = await createWebhookConsumer({ inbox: fits, secret }).listen({ port: 0 });
  const transport = new HttpTransport({ endpoints: { stock: `${server.url.replace(/\/$/, '')}/stock` }, secret });
  const relay = createRelay({ store: new MysqlRelayStore({ connection }), transport, pollIntervalMs: 20, metrics: false });
  const skus = ['a', 'b', 'c', 'd'];
  const committed: string[] = [];
  try {
    await relay.start();
    // The producer: each change locks its SKU row, writes it and enqueues the event in one transaction.
    for (let v = 1; v <= 8; v++) {
      await Promise.all(
        skus.map(async (sku) => {
          const conn = await pool.getConnection();
          try {
            await conn.beginTransaction();
            await conn.query('INSERT INTO skus (sku, quantity, version) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE quantity = VALUES(quantity), version = VALUES(version)', [sku, v * 10, v]);
            const [id] = await outbox.enqueue(conn, StockChanged({ aggregateId: sku, payload: { quantity: v * 10 }, version: v }));
            await conn.commit();
            committed.push(id!);
          } finally {
            conn.release();
          }
        }),
      );
    }
    const conn = await pool.getConnection();
    let rolledBack: string | undefined;
    try {
      await conn.beginTransaction();
      [rolledBack] = await outbox.enqueue(conn, StockChanged({ aggregateId: 'a', payload: { quantity: -1 }, version: 9 }));
      await conn.rollback();
    } finally {
      conn.release();
    }
    const effects = async (): Promise<string[]> => ((await pool.query('SELECT event_id FROM effects')) as unknown as [{ event_id: string }[]])[0].map((r) => r.event_id);
    await waitFor('every committed event applied', async () => (await effects()).length >= committed.length, 60_000);
    const applied = await effects();
    assert.deepEqual([...applied].sort(), [...committed].sort(), 'each committed event once; the rolled-back one never');
    assert.ok(rolledBack && !applied.includes(rolledBack));
    const [view] = (await pool.query('SELECT sku, quantity, version FROM stock_view ORDER BY sku')) as unknown as [{ sku: string; quantity: number; version: string }[]];
    assert.deepEqual(view.map((r) => [r.sku, Number(r.quantity), Number(r.version)]), skus.map((s) => [s, 80, 8]));

    // The relay marks an event published after the receiver answered, which is after the handler committed.
    const published = async (): Promise<number> => Number(((await pool.query(`SELECT COUNT(*) AS n FROM outbox WHERE state = 'published'`)) as unknown as [{ n: number }[]])[0][0]!.n);
    await waitFor('every committed event marked published', async () => (await published()) === committed.length, 60_000);
    const { copied } = await new MysqlAdmin(connection).replay({ destination: 'stock' }, 'test');
    assert.equal(copied, committed.length);
    await waitFor('the replay delivered and skipped', () => outcomes.length >= committed.length, 60_000);
    assert.equal((await effects()).length, committed.length, 'a replay applies nothing again');
  } finally {
    await relay.stop();
    await transport.close();
    await server.close();
    await inbox.stop();
  }
});
