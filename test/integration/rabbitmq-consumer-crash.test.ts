/**
 * A RabbitMQ consumer process killed with kill -9 between its inbox commit
 * and its ack: the broker redelivers the unacked messages (flag
 * `redelivered`) to a second consumer process, whose inbox skips the one
 * that committed; every effect happens once and every message is acked.
 * Real processes, real RabbitMQ, real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { AMQP_URL, TestBroker, assertNoOpenHandles, itemEvent, lockBroker } from '../fixtures/rabbitmq-consumer-broker.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/rabbitmq-consumer.ts', import.meta.url));
let unlock: () => Promise<void>;
let db: TestDb;
const broker = new TestBroker();

before(async () => {
  unlock = await lockBroker();
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL)`);
});
after(async () => {
  try {
    await broker.cleanup();
    await db.close();
  } finally {
    await unlock();
  }
  await assertNoOpenHandles();
});

interface Settled {
  readonly id: string;
  readonly status: string;
  readonly redelivered: boolean;
}

function startConsumer(queue: string, crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, AMQP_URL, SCHEMA: db.schema, QUEUE: queue, CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const settled: Settled[] = [];
  let buffer = '';
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      buffer += d.toString();
      const lines = buffer.split('\n');
      buffer = lines.pop()!;
      for (const line of lines) {
        if (line === 'consuming') resolve();
        else if (line.startsWith('{')) settled.push(JSON.parse(line) as Settled);
      }
    });
    child.on('exit', (code, signal) => reject(new Error(`consumer exited before consuming (${code ?? signal})`)));
  });
  ready.catch(() => {});
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, ready, exited, settled };
}

it('a consumer killed between commit and ack: the broker redelivers, the next consumer skips what committed; effects once, all acked', { timeout: 120_000 }, async () => {
  const q = await broker.queue();
  const events = Array.from({ length: 5 }, (_, i) => itemEvent(q, `crash${i}`, 1));
  await broker.publish(events);

  const first = startConsumer(q, true);
  const died = await first.exited;
  assert.equal(died.signal, 'SIGKILL', 'the first consumer killed itself after its first commit');
  const committed = await db.query<{ event_id: string }>(`SELECT event_id FROM "${db.schema}".effects`);
  assert.ok(committed.length >= 1, 'at least one effect committed before the crash');
  assert.deepEqual(first.settled, [], 'it died before acking anything');

  const second = startConsumer(q, false);
  await second.ready;
  try {
    await waitFor('every message settled by the second consumer', () => second.settled.length === events.length, 30_000);
  } finally {
    second.child.kill('SIGTERM');
  }
  assert.equal((await second.exited).code, 0, 'a graceful stop');

  const byId = new Map(second.settled.map((s) => [s.id, s]));
  for (const { event_id } of committed) {
    assert.deepEqual(byId.get(event_id), { id: event_id, status: 'duplicate', redelivered: true }, 'the committed event came back flagged redelivered and was skipped');
  }
  const rows = await db.query<{ event_id: string; n: number }>(`SELECT event_id, count(*)::int AS n FROM "${db.schema}".effects GROUP BY event_id`);
  assert.deepEqual(rows.map((r) => r.n), [1, 1, 1, 1, 1], 'every effect exactly once');
  const [processed] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE status = 'processed'`);
  assert.equal(processed!.n, events.length);
  assert.equal(await broker.ready(q), 0, 'everything acked');
});
