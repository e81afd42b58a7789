/**
 * Relay.health() and serveHealth (txbox/health): /healthz, /readyz and
 * /metrics of a real relay whose database connection runs through a TCP
 * proxy the test closes (database unreachable) and opens again; a
 * destination answering as down; a stopped relay; the loopback default.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { Registry } from 'prom-client';
import { ConfigError, createOutbox, createRelay, defineEvent, payloadType, TransportError, type HealthReport } from 'txbox';
import { pgConnection, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { prometheusMetrics } from 'txbox/prometheus';
import { serveHealth } from 'txbox/health';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';

const Order = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Gone = defineEvent({ type: 'GoneThing', aggregateType: 'Gone', destination: 'gone', payload: payloadType<{ n: number }>() });

async function get(url: string): Promise<{ status: number; body: string; type: string | null }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text(), type: res.headers.get('content-type') };
}

function check(body: string, name: string): { ok: boolean; detail?: string } {
  const report = (JSON.parse(body) as { components: (HealthReport & { name: string })[] }).components[0]!;
  return report.checks.find((c) => c.name === name)!;
}

describe('health: Relay.health() and serveHealth', () => {
  let db: TestDb;
  let proxy: TcpProxy;
  before(async () => {
    db = await openDb('postgres');
    proxy = await startTcpProxy(Number(new URL(DATABASE_URL).port || 5432), new URL(DATABASE_URL).hostname);
  });
  after(async () => {
    await proxy.close().catch(() => {});
    await db.close();
  });

  it('answers 200, then 503 on /readyz while the database is unreachable or a destination is down, and 503 on /healthz once stopped', async () => {
    const url = new URL(DATABASE_URL);
    url.port = String(proxy.port);
    const connection = pgConnection({ connectionString: url.toString(), maxConnections: 3 });
    const transport = new RecordingTransport({ fail: (e) => (e.destination === 'gone' ? new TransportError('destination-down', 'HTTP 404') : undefined) });
    const registry = new Registry();
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection }),
      transport,
      pollIntervalMs: 50,
      leaseTtlMs: 3000,
      circuitBreaker: { baseDelayMs: 60_000 },
      metrics: prometheusMetrics({ registry }),
    });
    await relay.start();
    const server = await serveHealth({ port: 0, sources: { relay }, metrics: registry });
    try {
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const ready = await get(`${server.url}/readyz`);
      assert.equal(ready.status, 200, ready.body);
      assert.equal(ready.type, 'application/json');
      assert.deepEqual(
        (JSON.parse(ready.body) as { components: HealthReport[] }).components[0]!.checks.map((c) => [c.name, c.ok]),
        [['database', true], ['leases', true], ['transport', true]],
      );
      assert.equal((await get(`${server.url}/healthz`)).status, 200);
      const scrape = await get(`${server.url}/metrics`);
      assert.equal(scrape.status, 200);
      assert.equal(scrape.type, registry.contentType);
      assert.match(scrape.body, /txbox_relay_leases_held \d+/);
      assert.match(scrape.body, /txbox_relay_relays_alive 1/);
      assert.equal((await get(`${server.url}/nope`)).status, 404);
      assert.equal((await fetch(`${server.url}/readyz`, { method: 'POST' })).status, 405);

      // Database unreachable: not ready (database, then leases), still live.
      await proxy.close();
      let body = '';
      await waitFor('/readyz 503 with the database down', async () => {
        const r = await get(`${server.url}/readyz`);
        body = r.body;
        return r.status === 503 && !check(r.body, 'database').ok;
      });
      assert.match(check(body, 'database').detail!, /failed|no successful round trip/);
      assert.equal((await get(`${server.url}/healthz`)).status, 200, 'the process is alive');
      await waitFor('leases not renewed', async () => !check((await get(`${server.url}/readyz`)).body, 'leases').ok, 10_000);
      // A database read gauge fails quietly: the scrape still answers.
      assert.equal((await get(`${server.url}/metrics`)).status, 200);

      // Back: ready again.
      await proxy.open();
      await waitFor('/readyz 200 again', async () => (await get(`${server.url}/readyz`)).status === 200, 15_000);

      // A destination answering as down: its circuit opens, the transport check fails.
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order, Gone] });
      await db.transaction((tx) => outbox.enqueue(tx, Gone({ aggregateId: 'g', payload: { n: 1 } })));
      await waitFor('transport check fails', async () => {
        const r = await get(`${server.url}/readyz`);
        body = r.body;
        return r.status === 503 && !check(r.body, 'transport').ok;
      });
      assert.match(check(body, 'transport').detail!, /"gone"/);
      assert.match((await get(`${server.url}/metrics`)).body, /txbox_relay_circuit_open\{destination="gone",transport="recording"\} 1/);

      await relay.stop();
      assert.equal((await get(`${server.url}/healthz`)).status, 503);
      assert.equal((await relay.health()).live, false);
    } finally {
      await relay.stop();
      await server.close();
      await connection.close();
    }
  });

  it('on loopback, answers only a loopback Host: a page that rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read it', async () => {
    const source = { health: async (): Promise<HealthReport> => ({ live: true, ready: true, checks: [] }) };
    const s = await serveHealth({ port: 0, sources: { source } });
    const withHost = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port: s.port, path: '/readyz', headers: { host } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.end();
      });
    try {
      assert.equal(await withHost(`attacker.example:${s.port}`), 421);
      for (const host of [`127.0.0.1:${s.port}`, `localhost:${s.port}`, 'localhost', `[::1]:${s.port}`]) assert.equal(await withHost(host), 200, host);
    } finally {
      await s.close();
    }
  });

  it('binds 127.0.0.1 by default and refuses another address without allowRemote', async () => {
    const source = { health: async (): Promise<HealthReport> => ({ live: true, ready: true, checks: [] }) };
    await assert.rejects(serveHealth({ port: 0, host: '0.0.0.0', sources: { source } }), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.field, 'host');
      assert.match(err.message, /allowRemote: true/);
      assert.match(err.message, /--metrics-allow-remote/);
      return true;
    });
    await assert.rejects(serveHealth({ port: 0, sources: {} }), /sources/);
    const open = await serveHealth({ port: 0, host: '0.0.0.0', allowRemote: true, sources: { source } });
    assert.equal((await get(`http://127.0.0.1:${open.port}/readyz`)).status, 200);
    assert.equal((await get(`http://127.0.0.1:${open.port}/metrics`)).status, 404);
    await open.close();
    // A source that throws or hangs is neither live nor ready.
    const broken = { health: async (): Promise<HealthReport> => Promise.reject(new Error('boom')) };
    const hanging = { health: () => new Promise<HealthReport>(() => {}) };
    const s = await serveHealth({ port: 0, sources: { source, broken, hanging }, timeoutMs: 100 });
    const r = await get(`${s.url}/healthz`);
    assert.equal(r.status, 503);
    assert.deepEqual((JSON.parse(r.body) as { components: { name: string; live: boolean }[] }).components, [
      { name: 'source', live: true },
      { name: 'broken', live: false },
      { name: 'hanging', live: false },
    ]);
    await s.close();
  });
});
