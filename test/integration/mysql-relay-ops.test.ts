/**
 * What a relay on MariaDB tells operators, as on PostgreSQL: the metrics
 * gauges (`outboxGauges`: pending, parked and the oldest pending age per
 * destination, relays alive), and the destinations down (a relay's open
 * circuits, written at every heartbeat, read by `MysqlAdmin.circuits` for
 * `txbox status` and the dashboard). One database per run.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { Registry } from 'prom-client';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { HttpTransport, createWebhookReceiver } from 'txbox/http';
import { prometheusMetrics } from 'txbox/prometheus';
import { MysqlAdmin, MysqlOutboxStore, MysqlRelayStore, migrateMysql, mysqlConnection, mysqlNames, type MysqlConnection } from 'txbox/mysql';
import { RecordingTransport } from 'txbox/testing';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { startReceiver, type TestReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Charged = defineEvent({ type: 'Charged', aggregateType: 'Invoice', destination: 'billing', payload: payloadType<{ n: number }>() });
const Poison = defineEvent({ type: 'Poison', aggregateType: 'Poison', destination: 'poison', payload: payloadType<{ n: number }>() });

const database = `txbox_myops_${randomBytes(4).toString('hex')}`;
let root: mysql.Connection;
let pool: mysql.Pool;
let connection: MysqlConnection;
let good: TestReceiver;

before(async () => {
  root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, dateStrings: true, timezone: 'Z' });
  connection = await mysqlConnection({ pool });
  good = await startReceiver();
});
after(async () => {
  await good.close();
  await pool.end();
  await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await root.end();
});

async function enqueue(table: string, events: Parameters<ReturnType<typeof createOutbox>['enqueue']>[1]): Promise<string[]> {
  const outbox = createOutbox({ store: new MysqlOutboxStore({ table }), events: [OrderPlaced, Charged, Poison] });
  return connection.transaction((tx) => outbox.enqueue(tx, events));
}

it('outboxGauges: pending, parked and the oldest pending age (by occurredAt) per destination, and the relays alive', async () => {
  const table = `g_${randomBytes(3).toString('hex')}`;
  await migrateMysql(connection, mysqlNames({ table }));
  const store = new MysqlRelayStore({ connection, table });
  assert.deepEqual(await store.outboxGauges(), { relaysAlive: 0, destinations: [] }, 'an empty outbox');
  const [a] = await enqueue(table, [OrderPlaced({ aggregateId: 'a', payload: { n: 1 } }), OrderPlaced({ aggregateId: 'b', payload: { n: 2 } }), Poison({ aggregateId: 'p', payload: { n: 3 } })]);
  await pool.query(`UPDATE \`${table}\` SET state = 'parked' WHERE destination = 'poison'`);
  await pool.query(`UPDATE \`${table}\` SET occurred_at = UTC_TIMESTAMP(6) - INTERVAL 90 SECOND WHERE id = ?`, [a]);
  // A published row counts nowhere; a relay alive, one expired and one that left: one alive.
  await enqueue(table, [OrderPlaced({ aggregateId: 'c', payload: { n: 4 } })]);
  await pool.query(`UPDATE \`${table}\` SET state = 'published', done_at = UTC_TIMESTAMP(6) WHERE aggregate_id = 'c'`);
  await pool.query(
    `INSERT INTO \`${table}_relays\` (relay_id, host, pid, ttl_ms, heartbeat_at, left_at) VALUES
     ('alive', 'h', 1, 30000, UTC_TIMESTAMP(6), NULL), ('expired', 'h', 2, 30000, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, NULL), ('left', 'h', 3, 30000, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`,
  );
  const g = await store.outboxGauges();
  assert.equal(g.relaysAlive, 1);
  const byDest = new Map(g.destinations.map((d) => [d.destination, d]));
  assert.deepEqual([...byDest.keys()].sort(), ['orders', 'poison']);
  assert.equal(byDest.get('orders')!.pending, 2);
  assert.equal(byDest.get('orders')!.parked, 0);
  const oldest = byDest.get('orders')!.oldestPendingSeconds;
  assert.ok(oldest >= 90 && oldest < 120, `oldest pending ${oldest}`);
  assert.deepEqual(byDest.get('poison'), { destination: 'poison', pending: 0, parked: 1, oldestPendingSeconds: 0 });
  // An event whose writer's clock runs ahead of the server's has no negative age.
  await pool.query(`UPDATE \`${table}\` SET occurred_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE destination = 'orders'`);
  const ahead = (await store.outboxGauges()).destinations.find((d) => d.destination === 'orders')!;
  assert.equal(ahead.oldestPendingSeconds, 0);
});

/** A receiver that answers 401 (a rotated secret) until `healthy` is set, then verifies and records. */
async function flakyReceiver(secret: string) {
  const arrivals: string[] = [];
  const state = { healthy: false, refused: 0 };
  const verify = createWebhookReceiver({ secret, onEvent: (e) => void arrivals.push(e.id) });
  const server: Server = createServer((req, res) => {
    if (state.healthy) return verify(req, res);
    state.refused++;
    req.resume();
    req.on('end', () => res.writeHead(401, { 'content-type': 'text/plain' }).end('invalid signature'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/billing`,
    arrivals,
    state,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

it('a destination down: the heartbeat records the open circuit (MysqlAdmin.circuits), the metrics show its backlog; both clear when it answers again', async () => {
  const table = `c_${randomBytes(3).toString('hex')}`;
  await migrateMysql(connection, mysqlNames({ table }));
  const billing = await flakyReceiver(good.secret);
  const billingIds = await enqueue(table, Array.from({ length: 6 }, (_, i) => Charged({ aggregateId: i % 2, payload: { n: i } })));
  const orderIds = await enqueue(table, Array.from({ length: 4 }, (_, i) => OrderPlaced({ aggregateId: i, payload: { n: i } })));
  const registry = new Registry();
  const relay = createRelay({
    store: new MysqlRelayStore({ connection, table }),
    transport: new HttpTransport({ endpoints: { orders: `${good.url}/orders`, billing: billing.url }, secret: good.secret, timeoutMs: 5000 }),
    relayId: 'relay-mysql-breaker',
    pollIntervalMs: 50,
    leaseTtlMs: 1500,
    batchSize: 10,
    retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 2 },
    circuitBreaker: { baseDelayMs: 100, maxDelayMs: 400 },
    metrics: prometheusMetrics({ registry }),
  });
  const admin = new MysqlAdmin(connection, { table });
  await relay.start();
  try {
    await waitFor('every orders event delivered while billing answers 401', () => orderIds.every((id) => good.arrivals.some((a) => a.id === id)), 30_000);
    await waitFor('billing refused a few probes', () => billing.state.refused >= 3, 30_000);
    await waitFor('the heartbeat carries the open circuit', async () => (await admin.circuits()).some((c) => c.destination === 'billing'), 10_000);
    const [circuit, ...more] = await admin.circuits();
    assert.deepEqual(more, []);
    assert.equal(circuit!.destination, 'billing');
    assert.equal(circuit!.relayId, 'relay-mysql-breaker');
    assert.match(circuit!.reason, /HTTP 401/);
    assert.ok(circuit!.openSince instanceof Date && !Number.isNaN(circuit!.openSince.getTime()));
    assert.ok(circuit!.nextProbeAt.getTime() >= circuit!.openSince.getTime());
    assert.equal(typeof circuit!.failedProbes, 'number');

    const text = await registry.metrics();
    assert.match(text, /^txbox_relay_backlog\{destination="billing"\} 6$/m, text);
    assert.match(text, /^txbox_relay_backlog\{destination="orders"\} 0$/m);
    assert.match(text, /^txbox_relay_relays_alive 1$/m);
    assert.match(text, /^txbox_relay_oldest_pending_age_seconds\{destination="billing"\} [\d.e+-]+$/m);
    assert.match(text, /^txbox_relay_parked\{destination="billing"\} 0$/m);

    billing.state.healthy = true;
    await waitFor('every billing event delivered', () => billing.arrivals.length >= billingIds.length, 30_000);
    await waitFor('the heartbeat shows the circuit closed', async () => (await admin.circuits()).length === 0, 10_000);
  } finally {
    await relay.stop();
    await billing.close();
  }
  assert.deepEqual([...billing.arrivals].sort(), [...billingIds].sort());
  // A relay that left shows no circuits, whatever its row held last.
  await pool.query(`UPDATE \`${table}_relays\` SET circuits = ? WHERE relay_id = 'relay-mysql-breaker'`, [JSON.stringify([{ destination: 'billing', reason: 'x', openSince: new Date().toISOString(), nextProbeAt: new Date().toISOString(), failedProbes: 0 }])]);
  assert.deepEqual(await admin.circuits(), []);
});

it('deleteOnPublish: the fenced completion deletes published rows; a stale token deletes nothing; retried and parked rows stay', async () => {
  const table = `d_${randomBytes(3).toString('hex')}`;
  await migrateMysql(connection, mysqlNames({ table }));
  assert.throws(() => new MysqlRelayStore({ connection, table, deleteOnPublish: 'yes' as never }), /deleteOnPublish: must be true or false, got "yes"/);
  const ids = await enqueue(table, [
    OrderPlaced({ aggregateId: 'a', payload: { n: 1 } }),
    OrderPlaced({ aggregateId: 'b', payload: { n: 2 } }),
    OrderPlaced({ aggregateId: 'c', payload: { n: 3 } }),
    OrderPlaced({ aggregateId: 'd', payload: { n: 4 } }),
  ]);
  const store = new MysqlRelayStore({ connection, table, deleteOnPublish: true });
  const leases = await store.lease('relay-del', [], 256, 30_000);
  assert.equal(leases.length, 256);
  const claimed = await store.claim(leases, { limit: 10, skipParkedDestinations: [] });
  assert.deepEqual(claimed.map((e) => e.id), ids);
  const token = (bucket: number) => leases.find((l) => l.bucket === bucket)!.token;
  const [a, b, c, d] = claimed as [(typeof claimed)[0], (typeof claimed)[0], (typeof claimed)[0], (typeof claimed)[0]];
  // A completion under a token the relay no longer holds (a takeover happened) is refused and deletes nothing.
  assert.deepEqual(await store.complete('relay-del', [{ seq: a.seq, token: String(BigInt(token(a.bucket)) + 1n), outcome: 'published' }]), { applied: 0, rejected: 1 });
  assert.deepEqual(await store.complete('relay-other', [{ seq: a.seq, token: token(a.bucket), outcome: 'published' }]), { applied: 0, rejected: 1 }, 'another relay cannot complete it');
  const result = await store.complete('relay-del', [
    { seq: a.seq, token: token(a.bucket), outcome: 'published' },
    { seq: b.seq, token: token(b.bucket), outcome: 'published' },
    { seq: c.seq, token: token(c.bucket), outcome: 'retry', delayMs: 60_000, error: 'HTTP 503' },
    { seq: d.seq, token: token(d.bucket), outcome: 'park', error: 'HTTP 400' },
  ]);
  assert.deepEqual(result, { applied: 4, rejected: 0 });
  const [rows] = (await pool.query(`SELECT id, state, attempts FROM \`${table}\` ORDER BY seq`)) as unknown as [{ id: string; state: string; attempts: number }[]];
  assert.deepEqual(rows, [
    { id: c.id, state: 'pending', attempts: 1 },
    { id: d.id, state: 'parked', attempts: 1 },
  ]);
  // Completing a deleted row again (a duplicate completion) applies nothing.
  assert.deepEqual(await store.complete('relay-del', [{ seq: a.seq, token: token(a.bucket), outcome: 'published' }]), { applied: 0, rejected: 1 });
  await store.leave('relay-del', leases);
});

it('retention prunes (the relay\'s and txbox prune) do not wait for a producer\'s open transaction, nor make marks and lease renewals wait behind it', async () => {
  const table = 'prune_locks';
  await migrateMysql(connection, mysqlNames({ table }));
  const ins = (state: string, done: string | null) =>
    pool.query(
      `INSERT INTO ${table} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at, state, done_at) VALUES (UUID(), 't', 'a', '1', 'k', CRC32('k') & 255, 'd', '{}', '{}', UTC_TIMESTAMP(6), ?, ?)`,
      [state, done],
    );
  for (let i = 0; i < 50; i++) await ins('published', '2000-01-01 00:00:00');
  await ins('pending', null);
  const store = new MysqlRelayStore({ connection, table });
  const leases = await store.lease('prune-r1', [], 256, 60_000);
  const [[pending]] = (await pool.query(`SELECT seq, bucket FROM ${table} WHERE state = 'pending'`)) as unknown as [[{ seq: number; bucket: number }]];
  // A producer's insert, not committed yet: a locking scan over the table waits for it.
  const producer = await pool.getConnection();
  try {
    await producer.beginTransaction();
    await producer.query(`INSERT INTO ${table} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at) VALUES (UUID(), 't', 'a', '2', 'k2', CRC32('k2') & 255, 'd', '{}', '{}', UTC_TIMESTAMP(6))`);
    const timed = async <T>(p: Promise<T>): Promise<number> => {
      const t0 = Date.now();
      await p;
      return Date.now() - t0;
    };
    const pruning = timed(store.prune(1, 1000));
    await new Promise((r) => setTimeout(r, 200));
    const token = leases.find((l) => l.bucket === Number(pending.bucket))!.token;
    const marking = timed(store.complete('prune-r1', [{ seq: Number(pending.seq), token, outcome: 'published' }]));
    const renewing = timed(store.lease('prune-r1', leases, 0, 60_000));
    for (let i = 0; i < 50; i++) await ins('skipped', '2000-01-01 00:00:00');
    const adminPruning = timed(new MysqlAdmin(connection, { table }).prune(1));
    const waited = await Promise.race([Promise.all([pruning, marking, renewing, adminPruning]), new Promise<'stuck'>((r) => setTimeout(r, 3000, 'stuck'))]);
    assert.notEqual(waited, 'stuck', 'prune (the relay\'s or txbox prune), mark or renewal waited for the producer\'s transaction');
  } finally {
    await producer.rollback();
    producer.release();
  }
  const [[left]] = (await pool.query(`SELECT count(*) AS n FROM ${table} WHERE done_at < '2001-01-01'`)) as unknown as [[{ n: number }]];
  assert.equal(Number(left.n), 0, 'the finished rows were pruned');
});

it('a mark MariaDB refuses for one event (a trigger of the application\'s) is isolated: that event parks with the reason, the rest of its batch is marked, nothing is published again and again', async () => {
  const table = `t_${randomBytes(3).toString('hex')}`;
  await migrateMysql(connection, mysqlNames({ table }));
  await pool.query(
    `CREATE TRIGGER \`${table}_refuse\` BEFORE UPDATE ON \`${table}\` FOR EACH ROW
     IF NEW.aggregate_id = 'refused' AND NEW.state = 'published' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'audit rule: refused'; END IF`,
  );
  const ids = await enqueue(table, ['a', 'refused', 'b'].map((id, i) => OrderPlaced({ aggregateId: id, payload: { n: i } })));
  const transport = new RecordingTransport();
  const relay = createRelay({ store: new MysqlRelayStore({ connection, table }), transport, relayId: 'relay-mysql-isolate', pollIntervalMs: 50, batchSize: 10 });
  await relay.start();
  try {
    await waitFor('the refused event parked, the others published', async () => {
      const [rows] = (await pool.query(`SELECT aggregate_id, state FROM \`${table}\` ORDER BY seq`)) as unknown as [{ aggregate_id: string; state: string }[]];
      return rows.map((r) => `${r.aggregate_id}:${r.state}`).join(',') === 'a:published,refused:parked,b:published';
    });
  } finally {
    await relay.stop();
  }
  const [[parked]] = (await pool.query(`SELECT last_error FROM \`${table}\` WHERE aggregate_id = 'refused'`)) as unknown as [[{ last_error: string }]];
  assert.match(parked.last_error, /audit rule: refused|could not be marked/);
  const sends = transport.acked.filter((e) => ids.includes(e.id)).length;
  assert.ok(sends <= 6, `published ${sends} times in all, not again and again`);
});

it('a mark of many events does not wait for a producer\'s open transaction (the server would scan and lock every row on a small table), with deleteOnPublish too', async () => {
  for (const deleteOnPublish of [false, true]) {
    const table = `m_${randomBytes(3).toString('hex')}`;
    await migrateMysql(connection, mysqlNames({ table }));
    await enqueue(table, Array.from({ length: 12 }, (_, i) => OrderPlaced({ aggregateId: `m${i}`, payload: { n: i } })));
    const store = new MysqlRelayStore({ connection, table, deleteOnPublish });
    const leases = await store.lease('mark-r1', [], 256, 60_000);
    const claimed = await store.claim(leases, { limit: 100, skipParkedDestinations: [] });
    assert.equal(claimed.length, 12);
    const producer = await pool.getConnection();
    try {
      await producer.beginTransaction();
      await producer.query(`INSERT INTO ${table} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at) VALUES (UUID(), 't', 'a', '2', 'k2', CRC32('k2') & 255, 'orders', '{}', '{}', UTC_TIMESTAMP(6))`);
      const token = (bucket: number) => leases.find((l) => l.bucket === bucket)!.token;
      const completions = claimed.map((e, i) =>
        i % 3 === 2 ? { seq: e.seq, token: token(e.bucket), outcome: 'retry' as const, delayMs: 1000, error: 'later' } : { seq: e.seq, token: token(e.bucket), outcome: 'published' as const },
      );
      const marked = await Promise.race([store.complete('mark-r1', completions), new Promise<'stuck'>((r) => setTimeout(r, 3000, 'stuck'))]);
      assert.notEqual(marked, 'stuck', `the mark waited for the producer's transaction (deleteOnPublish ${deleteOnPublish})`);
      assert.deepEqual(marked, { applied: 12, rejected: 0 });
    } finally {
      await producer.rollback();
      producer.release();
    }
  }
});
