/**
 * `txbox status` tells the truth about relays: a relay killed with SIGKILL
 * shows 'expired' once its lease TTL passed, a relay stopped with SIGTERM
 * shows 'left', and "in flight" counts live relays only. Runs the CLI as a
 * subprocess against the real PostgreSQL at 127.0.0.1:5432, one schema per test.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType, type NewEvent } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Shipped = defineEvent({ type: 'ItemShipped', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });

const dbs: TestDb[] = [];
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

const envFor = (db: TestDb, extra: Record<string, string> = {}): Record<string, string> => ({
  TXBOX_DATABASE_URL: DATABASE_URL,
  TXBOX_SCHEMA: db.schema,
  TXBOX_LOG_LEVEL: 'warn',
  ...extra,
});

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

interface StatusJson {
  inFlight: number;
  relays: { relayId: string; state: string; alive: boolean; inFlight: number; stateAgeSeconds: number }[];
  destinations: { destination: string; pending: number; parked: number; blockedByParked: number }[];
}

async function statusJson(db: TestDb): Promise<StatusJson> {
  const r = await runCli(['status', '--json'], envFor(db));
  expectExit(r, 0, 'status --json');
  return JSON.parse(r.stdout) as StatusJson;
}

const relayArgs = (id: string): string[] => ['relay', '--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/x', '--unsigned', '--lease-ttl-ms', '1000', '--poll-interval-ms', '50', '--relay-id', id];

describe('txbox status: relay states', { concurrency: true, timeout: 120_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
  });

  it('a killed relay shows expired after its TTL and its in-flight count is not counted; a stopped one shows left', async () => {
    const db = await freshDb();
    const killed = startCli(relayArgs('relay-killed'), envFor(db));
    const stopped = startCli(relayArgs('relay-stopped'), envFor(db));
    try {
      await waitFor('both relays registered with leases', async () => {
        const rows = await db.query<{ n: number }>(`SELECT count(DISTINCT owner)::int AS n FROM "${db.schema}".outbox_buckets WHERE lease_until > now()`);
        return rows[0]!.n === 2;
      }, 30_000);
    } finally {
      killed.child.kill('SIGKILL');
      stopped.child.kill('SIGTERM');
    }
    expectExit(await stopped.exited, 0, 'relay after SIGTERM');
    await killed.exited;
    // What the killed relay reported in its last heartbeat: events it had in flight when it died.
    await db.query(`UPDATE "${db.schema}".outbox_relays SET in_flight = 678 WHERE relay_id = 'relay-killed'`);

    let status: StatusJson | undefined;
    await waitFor('the killed relay shows expired', async () => {
      status = await statusJson(db);
      return status.relays.some((r) => r.relayId === 'relay-killed' && r.state === 'expired');
    }, 30_000, 200);
    const byId = new Map(status!.relays.map((r) => [r.relayId, r]));
    assert.equal(byId.get('relay-stopped')?.state, 'left', `a relay stopped with SIGTERM shows left: ${JSON.stringify(status!.relays)}`);
    assert.equal(byId.get('relay-killed')!.alive, false);
    assert.equal(status!.inFlight, 0, 'in flight counts live relays only');

    const text = await runCli(['status'], envFor(db));
    expectExit(text, 0, 'status');
    assert.match(text.stdout, /^relay-killed\s+expired [\d.]+s ago/m, text.stdout);
    assert.match(text.stdout, /^relay-stopped\s+left [\d.]+s ago/m, text.stdout);
    assert.match(text.stdout, /in flight 0 /, text.stdout);
  });

  it('a live relay shows alive with its heartbeat age', async () => {
    const db = await freshDb();
    const relay = startCli(relayArgs('relay-alive'), envFor(db));
    try {
      await waitFor('the relay registered', async () => {
        const rows = await db.query(`SELECT 1 FROM "${db.schema}".outbox_relays WHERE relay_id = 'relay-alive'`);
        return rows.length === 1;
      }, 30_000);
      const text = await runCli(['status'], envFor(db));
      expectExit(text, 0, 'status');
      assert.match(text.stdout, /^relay-alive\s+alive, heartbeat [\d.]+s ago/m, text.stdout);
    } finally {
      relay.child.kill('SIGTERM');
      expectExit(await relay.exited, 0, 'relay after SIGTERM');
    }
  });

  it('shows per destination how many pending events wait behind parked ones, and `parked list` shows the key', async () => {
    const db = await freshDb();
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed, Shipped] });
    const evs: NewEvent<{ n: number }>[] = [
      Placed({ aggregateId: 'o1', payload: { n: 1 } }), // parked
      Placed({ aggregateId: 'o1', payload: { n: 2 } }), // waits behind it
      Shipped({ aggregateId: 'i1', key: 'Order:o1', payload: { n: 3 } }), // same key, other destination: waits too
      Placed({ aggregateId: 'o2', payload: { n: 4 } }), // free
    ];
    const ids = await db.transaction((tx) => outbox.enqueue(tx, evs));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'parked', attempts = 3, last_error = 'HTTP 400', parked_at = now() WHERE id = $1`, [ids[0]]);

    const status = await statusJson(db);
    const byDest = new Map(status.destinations.map((d) => [d.destination, d]));
    assert.equal(byDest.get('orders')?.blockedByParked, 1, JSON.stringify(status.destinations));
    assert.equal(byDest.get('items')?.blockedByParked, 1, JSON.stringify(status.destinations));
    const text = await runCli(['status'], envFor(db));
    expectExit(text, 0, 'status');
    assert.match(text.stdout, /^orders\s+2\s+0\s+1\s+1\s/m, text.stdout);

    const list = await runCli(['parked', 'list'], envFor(db));
    expectExit(list, 0, 'parked list');
    assert.match(list.stdout, new RegExp(`^${ids[0]}  OrderPlaced  dest=orders  key=Order:o1 `, 'm'), list.stdout);
  });
});
