/**
 * The WAL wake mode through the CLI, as an operator runs it: `txbox migrate
 * --wake wal`, `txbox wal check`, `txbox relay --wake wal` processes woken by
 * the WAL alone (polling every 10 minutes, producers without NOTIFY),
 * `txbox status` and `txbox wal slots` showing the slot and its lag, kill -9
 * of a relay while it holds its slot (the temporary slot goes with it; the next
 * relay publishes everything), and `txbox wal drop-slots --active`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType, type Outbox } from 'txbox';
import { dropPublication, postgresNames, PostgresOutboxStore, walSlots } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type RunningCli } from '../helpers/cli.ts';
import { startReceiver, type TestReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Changed = defineEvent({ type: 'Changed', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });

let db: TestDb;
let receiver: TestReceiver;
let outbox: Outbox;
const relays: RunningCli[] = [];
const env = () => ({ TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_WEBHOOK_SECRET: receiver.secret, TXBOX_LOG_LEVEL: 'info' });

function relay(id: string): RunningCli {
  const r = startCli(
    ['relay', '--transport', 'http', '--endpoint', `items=${receiver.url}/items`, '--wake', 'wal', '--lease-ttl-ms', '1500', '--poll-interval-ms', '600000', '--relay-id', id],
    env(),
  );
  relays.push(r);
  return r;
}

async function produce(keys: number, rounds: number, committed = new Map<string, string[]>()): Promise<Map<string, string[]>> {
  for (let round = 0; round < rounds; round++) {
    const events = Array.from({ length: keys }, (_, k) => Changed({ aggregateId: k, payload: { n: round } }));
    const ids = await db.transaction((tx) => outbox.enqueue(tx, events));
    ids.forEach((id, k) => committed.set(`Item:${k}`, [...(committed.get(`Item:${k}`) ?? []), id]));
  }
  return committed;
}

const slots = () => walSlots(db.connection, postgresNames({ schema: db.schema }));

describe('WAL wake mode through the CLI', { timeout: 120_000 }, () => {
  before(async () => {
    db = await openDb('postgres');
    receiver = await startReceiver();
    outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [Changed] });
  });
  after(async () => {
    for (const r of relays) if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGKILL');
    await Promise.all(relays.map((r) => r.exited));
    await receiver.close();
    await dropPublication(db.connection, postgresNames({ schema: db.schema })).catch(() => {});
    await db.close();
  });

  it('a bad --wake or wal action is refused with the choices', async () => {
    const bad = await runCli(['relay', '--transport', 'http', '--unsigned', '--endpoint', 'items=http://127.0.0.1:9/x', '--wake', 'wall'], env());
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /--wake wall: choose notify \(LISTEN\/NOTIFY and polling\) or wal/);
    const none = await runCli(['wal'], env());
    assert.equal(none.code, 2, none.stderr);
    assert.match(none.stderr, /wal: choose an action: check, slots or drop-slots/);
  });

  it('migrate --wake wal creates the publication and checks the server; wal check agrees', async () => {
    const migrated = await runCli(['migrate', '--wake', 'wal'], env());
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.match(migrated.stdout, /publication "txbox_\w+_outbox" created/);
    assert.match(migrated.stdout, /WAL wake mode: ready/);
    const check = await runCli(['wal', 'check'], env());
    assert.equal(check.code, 0, check.stdout + check.stderr);
    assert.match(check.stdout, /WAL wake mode available/);
  });

  it('relays woken by the WAL alone; kill -9 while holding the slot drops it; the next relay publishes everything', async () => {
    const first = relay('wal-killed');
    await waitFor('ready', () => first.stdout().includes('txbox relay ready'), 30_000);
    await waitFor('its slot is streaming', async () => (await slots()).some((s) => s.active), 30_000);
    const committed = await produce(20, 5);
    await waitFor('delivered by WAL wake-ups', () => new Set(receiver.arrivals.map((a) => a.id)).size >= 100, 30_000);

    const status = await runCli(['status'], env());
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /replication slots \(WAL wake mode\):\n {2}txbox_\w+: active, lag [\d,]+ bytes/);
    const listed = await runCli(['wal', 'slots', '--json'], env());
    assert.equal((JSON.parse(listed.stdout) as unknown[]).length, 1);

    first.child.kill('SIGKILL');
    await first.exited;
    await waitFor('the temporary slot went with the killed relay', async () => (await slots()).length === 0, 20_000);
    await produce(20, 5, committed);
    const second = relay('wal-next');
    await waitFor('ready', () => second.stdout().includes('txbox relay ready'), 30_000);
    await waitFor('all delivered after the kill', () => new Set(receiver.arrivals.map((a) => a.id)).size >= 200, 30_000);
    const report = checkDeliveries(committed, receiver.arrivals);
    assert.equal(report.lost, 0);
    assert.equal(report.phantom, 0);
    assert.equal(report.orderViolations, 0);

    await waitFor('the second relay streams', async () => (await slots()).some((s) => s.active), 30_000);
    const dropped = await runCli(['wal', 'drop-slots', '--active'], env());
    assert.equal(dropped.code, 0, dropped.stderr);
    assert.match(dropped.stdout, /dropped txbox_/);
    // The relay falls back (polling every 10 minutes here), opens a new slot and is woken by it again.
    await waitFor('a new slot', async () => (await slots()).some((s) => s.active), 30_000);
    await produce(20, 1, committed);
    await waitFor('delivered from the new slot', () => new Set(receiver.arrivals.map((a) => a.id)).size >= 220, 30_000);
    assert.match(second.stderr(), /WAL wake-up unavailable/);
    second.child.kill('SIGTERM');
    const exited = await second.exited;
    assert.equal(exited.code, 0, exited.stderr);
    await waitFor('no slot left', async () => (await slots()).length === 0, 20_000);
  });
});
