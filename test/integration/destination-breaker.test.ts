/**
 * One bad credential must not park every key (issue 11 item 9): a receiver
 * answering 401 is a destination down. Its events stay pending in order with
 * their attempts unchanged, the destination's circuit opens (logged once,
 * shown in the relay's heartbeat for `txbox status`), other destinations keep
 * flowing, and when the receiver answers again everything arrives in order.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { HttpTransport, createWebhookReceiver } from 'txbox/http';
import { RedisTransport, parseStreamEntry } from 'txbox/redis';
import { RecordingTransport } from 'txbox/testing';
import { PostgresAdmin, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { startReceiver, type TestReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';

const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number; card: string }>() });
const Charged = defineEvent({ type: 'Charged', aggregateType: 'Invoice', destination: 'billing', payload: payloadType<{ n: number; card: string }>() });

/** A receiver that answers 401 (a rotated secret) until `healthy` is set, then verifies and records. */
async function flakyReceiver(secret: string) {
  const arrivals: { id: string; key: string }[] = [];
  const state = { healthy: false, refused: 0 };
  const verify = createWebhookReceiver({ secret, onEvent: (e) => void arrivals.push({ id: e.id, key: e.key }) });
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

describe('per-destination circuit breaker (HTTP, PostgreSQL)', () => {
  let db: TestDb;
  let good: TestReceiver;
  before(async () => {
    db = await openDb('postgres');
    good = await startReceiver();
  });
  after(async () => {
    await good.close();
    await db.close();
  });

  it('a 401 destination pauses without parking or counting attempts; the others flow; it resumes in order', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderPlaced, Charged] });
    const billing = await flakyReceiver(good.secret);
    // billing's events come first in outbox order, and interleave with orders'.
    const billingIds = new Map<string, string[]>();
    const orderIds: string[] = [];
    for (let i = 0; i < 6; i++) {
      await db.transaction(async (tx) => {
        for (let k = 0; k < 4; k++) {
          const [id] = await outbox.enqueue(tx, Charged({ aggregateId: k, payload: { n: i, card: 'SECRET-PAYLOAD-4111' } }));
          billingIds.set(`Invoice:${k}`, [...(billingIds.get(`Invoice:${k}`) ?? []), id!]);
          orderIds.push(...(await outbox.enqueue(tx, OrderPlaced({ aggregateId: k, payload: { n: i, card: 'SECRET-PAYLOAD-4111' } }))));
        }
      });
    }
    const logs: { level: string; obj: Record<string, unknown>; msg: string }[] = [];
    const log = (level: string) => (obj: object, msg?: string) => void logs.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
    const relay = createRelay({
      // The periodic sweep of held rows (30 s by default) off: the rows queued behind billing's deferred heads
      // must be released by the statement that publishes their head, not by the sweep (they waited 30 s for it).
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection, releaseHeldEveryMs: 3_600_000 }),
      transport: new HttpTransport({ endpoints: { orders: `${good.url}/orders`, billing: billing.url }, secret: good.secret, timeoutMs: 5000 }),
      relayId: 'relay-breaker',
      pollIntervalMs: 50,
      leaseTtlMs: 1500,
      batchSize: 10,
      retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 2 },
      circuitBreaker: { baseDelayMs: 100, maxDelayMs: 400 },
      logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
    });
    await relay.start();
    try {
      await waitFor('every orders event delivered while billing answers 401', () => orderIds.every((id) => good.arrivals.some((a) => a.id === id)), 30_000);
      await waitFor('billing refused a few probes', () => billing.state.refused >= 3, 30_000);
      const rows = await db.query<{ state: string; attempts: number; n: number }>(
        `SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox WHERE destination = 'billing' GROUP BY 1, 2`,
      );
      assert.deepEqual(rows, [{ state: 'pending', attempts: 0, n: 24 }], 'billing events stay pending, attempts not counted, none parked');
      assert.equal(billing.arrivals.length, 0);

      // txbox status (another process) sees the open circuit through the relay's heartbeat.
      const admin = new PostgresAdmin(db.connection, { schema: db.schema });
      await waitFor('the heartbeat carries the open circuit', async () => (await admin.circuits()).some((c) => c.destination === 'billing'), 10_000);
      const [circuit] = await admin.circuits();
      assert.equal(circuit!.destination, 'billing');
      assert.equal(circuit!.relayId, 'relay-breaker');
      assert.match(circuit!.reason, /HTTP 401/);
      assert.ok(circuit!.openSince instanceof Date && circuit!.nextProbeAt instanceof Date);
      assert.ok(circuit!.nextProbeAt.getTime() >= circuit!.openSince.getTime());

      billing.state.healthy = true; // the secret is fixed
      await waitFor('every billing event delivered', () => billing.arrivals.length >= 24, 30_000);
      await waitFor('the heartbeat shows the circuit closed', async () => (await admin.circuits()).length === 0, 10_000);
    } finally {
      await relay.stop();
      await billing.close();
    }
    for (const [key, ids] of billingIds) {
      assert.deepEqual(billing.arrivals.filter((a) => a.key === key).map((a) => a.id), ids, `${key} arrived in outbox order`);
    }
    const after = await db.query<{ state: string; attempts: number; n: number }>(
      `SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox WHERE destination = 'billing' GROUP BY 1, 2`,
    );
    assert.deepEqual(after, [{ state: 'published', attempts: 1, n: 24 }], 'published with one counted attempt each');
    const opened = logs.filter((l) => /circuit open/.test(l.msg));
    const closed = logs.filter((l) => /circuit closed/.test(l.msg));
    assert.equal(opened.length, 1, `logged once on opening: ${JSON.stringify(opened)}`);
    assert.equal(opened[0]!.level, 'error');
    assert.equal(opened[0]!.obj.destination, 'billing');
    assert.match(String(opened[0]!.obj.reason), /401/);
    assert.equal(closed.length, 1, 'logged once on closing');
    assert.ok(!JSON.stringify(logs).includes('SECRET-PAYLOAD'), 'no payload in the logs');
    assert.equal(logs.filter((l) => l.msg.includes('parked')).length, 0);
  });
});

/** A TCP proxy to the shared Redis that the test stops (connections refused) and starts again on the same port. */
class RedisProxy {
  #server: TcpServer | null = null;
  readonly #sockets = new Set<Socket>();
  port = 0;

  async start(): Promise<void> {
    this.#server = createTcpServer((client) => {
      const upstream = connect(6379, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {});
      }
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.#server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    for (const s of this.#sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

describe('per-destination circuit breaker (Redis out of reach, PostgreSQL)', () => {
  it('Redis refusing connections pauses its destination without parking; the other route flows; it resumes in order', async () => {
    const db = await openDb('postgres');
    const admin = new Redis('redis://127.0.0.1:6379');
    const prefix = `txbox-test:breaker-${randomBytes(4).toString('hex')}:`;
    const proxy = new RedisProxy();
    await proxy.start();
    const recorded = new RecordingTransport();
    const redis = new RedisTransport({ url: `redis://127.0.0.1:${proxy.port}`, streamPrefix: prefix, commandTimeoutMs: 2000 });
    const changes: string[] = [];
    const billingIds = new Map<string, string[]>();
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      routes: [
        { name: 'recorded', transport: recorded, destinations: ['orders'] },
        { name: 'redis', transport: redis, destinations: ['billing'] },
      ],
      pollIntervalMs: 50,
      leaseTtlMs: 1500,
      retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 2 },
      circuitBreaker: { baseDelayMs: 100, maxDelayMs: 400 },
    });
    relay.on('circuit', (c) => void changes.push(`${c.destination} ${c.state}`));
    try {
      await relay.start();
      await proxy.stop(); // Redis is now out of reach: connections are refused
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderPlaced, Charged] });
      const orderIds: string[] = [];
      for (let i = 0; i < 5; i++) {
        await db.transaction(async (tx) => {
          for (let k = 0; k < 3; k++) {
            const [id] = await outbox.enqueue(tx, Charged({ aggregateId: k, payload: { n: i, card: 'x' } }));
            billingIds.set(`Invoice:${k}`, [...(billingIds.get(`Invoice:${k}`) ?? []), id!]);
            orderIds.push(...(await outbox.enqueue(tx, OrderPlaced({ aggregateId: k, payload: { n: i, card: 'x' } }))));
          }
        });
      }
      await waitFor('every orders event recorded while Redis is out of reach', () => orderIds.every((id) => recorded.acked.some((e) => e.id === id)), 30_000);
      await waitFor('the billing circuit opened', () => changes.includes('billing open'), 30_000);
      const down = await db.query<{ state: string; attempts: number; n: number }>(
        `SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox WHERE destination = 'billing' GROUP BY 1, 2`,
      );
      assert.deepEqual(down, [{ state: 'pending', attempts: 0, n: 15 }], 'billing events stay pending, attempts not counted, none parked');

      await proxy.start(); // Redis is back on the same address
      await waitFor('every billing event in the stream', async () => (await admin.xlen(`${prefix}billing`)) >= 15, 30_000);
      await waitFor('the billing circuit closed', () => changes.includes('billing closed'), 10_000);
    } finally {
      await relay.stop();
      await proxy.stop();
    }
    try {
      const entries = await admin.xrange(`${prefix}billing`, '-', '+');
      const arrived = entries.map(([, fields]) => parseStreamEntry(fields, 'billing')).map((p) => {
        if (!p.ok) throw new Error(p.message);
        return p.event;
      });
      for (const [key, ids] of billingIds) {
        assert.deepEqual([...new Set(arrived.filter((e) => e.key === key).map((e) => e.id))], ids, `${key} arrived in outbox order`);
      }
      const rows = await db.query<{ state: string; attempts: number; n: number }>(
        `SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox WHERE destination = 'billing' GROUP BY 1, 2`,
      );
      assert.deepEqual(rows, [{ state: 'published', attempts: 1, n: 15 }]);
    } finally {
      await admin.del(`${prefix}billing`);
      admin.disconnect();
      await db.close();
    }
  });
});

describe('per-destination circuit breaker (Redis gone silent, PostgreSQL)', () => {
  it('a Redis that answers nothing (connection open, a black hole) pauses its destination without counting attempts; a new connection resumes it', { timeout: 60_000 }, async () => {
    const db = await openDb('postgres');
    const admin = new Redis('redis://127.0.0.1:6379');
    const prefix = `txbox-test:silent-${randomBytes(4).toString('hex')}:`;
    const proxy = await startTcpProxy(6379);
    const redis = new RedisTransport({ url: `redis://127.0.0.1:${proxy.port}`, streamPrefix: prefix, commandTimeoutMs: 300 });
    const changes: string[] = [];
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport: redis,
      pollIntervalMs: 50,
      retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 3 },
      circuitBreaker: { baseDelayMs: 100, maxDelayMs: 400 },
    });
    relay.on('circuit', (c) => void changes.push(`${c.destination} ${c.state}`));
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Charged] });
    const enqueue = (n: number) => db.transaction((tx) => outbox.enqueue(tx, Charged({ aggregateId: n % 3, payload: { n, card: 'x' } })));
    const attempts = () => db.query<{ state: string; attempts: number; n: number }>(`SELECT state, attempts, count(*)::int AS n FROM "${db.schema}".outbox GROUP BY 1, 2 ORDER BY 1, 2`);
    try {
      await relay.start();
      for (let n = 0; n < 3; n++) await enqueue(n);
      await waitFor('the first events in the stream', async () => (await admin.xlen(`${prefix}billing`)) >= 3, 15_000);

      // Every connection goes silent, and new ones are held: nothing answers at all.
      proxy.hold();
      proxy.silence();
      for (let n = 3; n < 9; n++) await enqueue(n);
      await waitFor('the billing circuit opened', () => changes.includes('billing open'), 15_000);
      await new Promise((r) => setTimeout(r, 1500)); // several probes, each unanswered
      assert.deepEqual(
        (await attempts()).filter((r) => r.state === 'pending'),
        [{ state: 'pending', attempts: 0, n: 6 }],
        'events stay pending with no attempt counted (more silence than maxAttempts allows, none parked)',
      );

      // The path works again for new connections (the old one stays silent, as after a NAT or firewall lost its state).
      proxy.release();
      await waitFor('every event in the stream', async () => (await admin.xlen(`${prefix}billing`)) >= 9, 20_000);
      await waitFor('the billing circuit closed', () => changes.includes('billing closed'), 10_000);
      await waitFor('every event marked published', async () => (await attempts()).every((r) => r.state === 'published'), 10_000);
      assert.deepEqual(await attempts(), [{ state: 'published', attempts: 1, n: 9 }]);
    } finally {
      await relay.stop();
      await proxy.close();
      await admin.del(`${prefix}billing`);
      admin.disconnect();
      await db.close();
    }
  });
});
