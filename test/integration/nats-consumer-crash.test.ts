/**
 * A NatsConsumer process killed with kill -9 between its inbox commit and
 * its ack: after ack_wait JetStream delivers the message again, to a second
 * process on the same durable, whose inbox skips it: the effect happens
 * once and the message is acked. Real processes, the real nats-server on
 * 127.0.0.1:4222, real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { JetStreamAdmin, item, MAIN_SERVERS, publishAll, type TestStreams } from '../fixtures/nats-consumer-helpers.ts';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/nats-consumer-process.ts', import.meta.url));
const ACK_WAIT_MS = 2000;
let db: TestDb;
let admin: JetStreamAdmin;
let s: TestStreams;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL)`);
  admin = await JetStreamAdmin.open();
  s = await admin.streams();
});
after(async () => {
  await s.delete();
  await admin.close();
  await db.close();
});

interface Settled {
  readonly id: string;
  readonly status: string;
  readonly deliveryCount: number;
}

function startConsumer(crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, SCHEMA: db.schema, NATS_SERVERS: MAIN_SERVERS, STREAM: s.stream, DURABLE: 'crash', ACK_WAIT_MS: String(ACK_WAIT_MS), CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const settled: Settled[] = [];
  let buffer = '';
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      buffer += d.toString();
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line === 'consuming') resolve();
        else if (line.startsWith('{')) settled.push(JSON.parse(line) as Settled);
      }
    });
    child.on('exit', (code, signal) => reject(new Error(`consumer exited early (${code ?? signal})`)));
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_c, signal) => resolve(signal)));
  return { child, ready, exited, settled };
}

it('a consumer killed between commit and ack: the redelivery to a second process on the durable is skipped and acked', { timeout: 90_000 }, async () => {
  const events = [item('crash', 1), item('crash', 2), item('crash', 3)];
  const transport = s.transport();
  await transport.start();
  await publishAll(transport, [[events[0]!], [events[1]!], [events[2]!]]);
  await transport.close();

  const first = startConsumer(true);
  await first.ready.catch(() => {}); // it may die before printing `consuming`
  assert.equal(await first.exited, 'SIGKILL');
  assert.deepEqual(first.settled, [], 'it died before acking anything');
  const effects = async (): Promise<string[]> => (await db.query<{ event_id: string }>(`SELECT event_id FROM "${db.schema}".effects`)).map((r) => r.event_id);
  assert.deepEqual(await effects(), [events[0]!.id], 'the first effect committed before the crash');

  const second = startConsumer(false);
  await second.ready;
  try {
    await waitFor('the second process settled all three', () => second.settled.length >= 3, 30_000);
    await waitFor('every message acked', async () => (await s.consumer('crash'))?.num_ack_pending === 0);
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
  assert.deepEqual(
    second.settled.map((x) => [x.id, x.status]),
    [
      [events[0]!.id, 'duplicate'],
      [events[1]!.id, 'processed'],
      [events[2]!.id, 'processed'],
    ],
    'the committed event was skipped, the rest applied in order',
  );
  assert.ok(second.settled[0]!.deliveryCount >= 2, 'it was a redelivery');
  assert.deepEqual((await effects()).sort(), events.map((e) => e.id).sort(), 'each effect exactly once');
  const [row] = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE event_id = $1`, [events[0]!.id]);
  assert.equal(row!.status, 'processed');
});
