/**
 * A Redis consumer process killed with kill -9 between its inbox commit and
 * its XACK: the entry stays pending for the dead consumer; a second consumer
 * process takes it over with XAUTOCLAIM once it was idle for claimIdleMs,
 * the inbox skips it, and it is acked. The effect happens once. Real
 * processes, real Redis, real PostgreSQL.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { uuidv7, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { encodeStreamFields } from 'txbox/redis';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/redis-consumer.ts', import.meta.url));
const REDIS_URL = 'redis://127.0.0.1:6379';
const stream = `txbox-test:rcc-${randomBytes(4).toString('hex')}:items`;
const group = 'crash-test';
let db: TestDb;
let admin: Redis;

before(async () => {
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL)`);
  admin = new Redis(REDIS_URL, { lazyConnect: true });
  await admin.connect();
});
after(async () => {
  await admin.del(stream, `${stream}:dead`);
  await admin.quit();
  await db.close();
});

function startConsumer(name: string, crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, REDIS_URL, SCHEMA: db.schema, STREAM: stream, GROUP: group, CONSUMER_NAME: name, CLAIM_IDLE_MS: '300', CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, stdout: () => out, exited };
}

it('a consumer killed between commit and XACK: another consumer reclaims the entry with XAUTOCLAIM and skips it', { timeout: 60_000 }, async () => {
  const event: OutboxEvent = { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: '1', key: 'Item:1', destination: 'items', payload: { n: 1 }, headers: {}, occurredAt: new Date(), version: 1 };
  await admin.xadd(stream, '*', ...encodeStreamFields(event));

  const first = startConsumer('first', true);
  assert.equal((await first.exited).signal, 'SIGKILL');
  assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length, 1, 'the effect committed before the crash');
  const owners = (await admin.xpending(stream, group)) as [number, string, string, [string, string][]];
  assert.equal(owners[0], 1, 'the entry is still pending: it was never acked');
  assert.deepEqual(owners[3], [['first', '1']]);

  const second = startConsumer('second', false);
  try {
    await waitFor('the second consumer settled the reclaimed entry', () => second.stdout().includes(`settled duplicate ${event.id}`), 30_000);
    assert.match(second.stdout(), /reclaimed 1/);
    await waitFor('the entry was acked', async () => ((await admin.xpending(stream, group)) as [number])[0] === 0);
  } finally {
    second.child.kill('SIGTERM');
  }
  assert.deepEqual(await second.exited, { code: 0, signal: null }, 'SIGTERM stops the consumer gracefully');
  assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length, 1, 'the redelivery was skipped');
  const [row] = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE event_id = $1`, [event.id]);
  assert.equal(row!.status, 'processed');
});
