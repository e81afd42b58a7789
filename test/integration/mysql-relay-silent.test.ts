/**
 * The MySQL/MariaDB relay and inbox stores when their connections go silent (see
 * relay-db-silent.test.ts for PostgreSQL): a proxy stops forwarding on every
 * open connection without closing them; new connections work. The relay must
 * bound its statements, drop those connections and publish again.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createInbox, createOutbox, createRelay, defineEvent, payloadType, uuidv7, type OutboxEvent } from 'txbox';
import { MysqlInboxStore, MysqlOutboxStore, MysqlRelayStore, migrateMysql, migrateMysqlInbox, mysqlConnection, mysqlInboxNames, mysqlNames, type MysqlConnection } from 'txbox/mysql';
import { RecordingTransport } from 'txbox/testing';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';
import { processAfterSilence } from '../helpers/outage.ts';

const Order = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

let proxy: TcpProxy;
let database: string;
let direct: MysqlConnection;

before(async () => {
  database = `txbox_silent_${randomBytes(4).toString('hex')}`;
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  await root.end();
  direct = await mysqlConnection({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`) });
  await migrateMysql(direct, mysqlNames());
  proxy = await startTcpProxy(Number(new URL(MYSQL_URL).port || 3306), new URL(MYSQL_URL).hostname);
});
after(async () => {
  await proxy.close().catch(() => {});
  await direct.query(`DROP DATABASE \`${database}\``).catch(() => {});
  await direct.close();
});

it('publishes again over new connections when every open one goes silent', { timeout: 60_000 }, async () => {
  const url = new URL(MYSQL_URL.replace(/\/[^/]*$/, `/${database}`));
  url.port = String(proxy.port);
  const connection = await mysqlConnection({ uri: url.toString(), maxConnections: 3 });
  const transport = new RecordingTransport();
  const relay = createRelay({ store: new MysqlRelayStore({ connection, statementTimeoutMs: 2000 }), transport, pollIntervalMs: 200, leaseTtlMs: 3000 });
  const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [Order] });
  await relay.start();
  try {
    for (let n = 0; n < 5; n++) await direct.transaction((tx) => outbox.enqueue(tx, Order({ aggregateId: `a${n}`, payload: { n } })));
    await waitFor('the first events published', () => Promise.resolve(transport.acked.length >= 5), 15_000, 20);
    proxy.silence();
    const silencedAt = performance.now();
    for (let n = 5; n < 10; n++) await direct.transaction((tx) => outbox.enqueue(tx, Order({ aggregateId: `a${n}`, payload: { n } })));
    await waitFor('the events enqueued after the silence published', () => Promise.resolve(transport.acked.length >= 10), 30_000, 50);
    const took = performance.now() - silencedAt;
    assert.ok(took < 20_000, `took ${Math.round(took)} ms`);
  } finally {
    const stopping = performance.now();
    await relay.stop();
    assert.ok(performance.now() - stopping < 15_000, 'stop() waited on the silent connections');
    await connection.close();
  }
});

it('the inbox processes again over new connections when every open one goes silent', { timeout: 60_000 }, async () => {
  await migrateMysqlInbox(direct, mysqlInboxNames());
  await direct.query('CREATE TABLE IF NOT EXISTS effects (event_id VARCHAR(36) NOT NULL PRIMARY KEY) ENGINE = InnoDB');
  const url = new URL(MYSQL_URL.replace(/\/[^/]*$/, `/${database}`));
  url.port = String(proxy.port);
  const connection = await mysqlConnection({ uri: url.toString(), maxConnections: 2 });
  const inbox = createInbox({ store: new MysqlInboxStore({ connection, statementTimeoutMs: 1000 }), consumer: 'silent', handlerTimeoutMs: 1000, autoStart: false });
  inbox.on('Noted', async (e, tx) => void (await tx.query('INSERT INTO effects (event_id) VALUES (?)', [e.id])));
  const note = (key: string): OutboxEvent => ({ id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: key, key: `Note:${key}`, destination: 'notes', payload: {}, headers: {}, occurredAt: new Date(), version: null });
  try {
    const took = await processAfterSilence(proxy, inbox, [note('a'), note('b')], note('c'));
    assert.ok(took < 15_000, `took ${Math.round(took)} ms`);
  } finally {
    await connection.close();
  }
});
