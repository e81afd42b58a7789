/**
 * Held events under consumer kills (issue 11 item 7), as the issue saw it on
 * a smaller scale: two consumer processes of one Redis Streams group apply
 * 20 keys x 15 versions to a version-guarded projection with
 * `onGap: 'hold'` (the group splits a key's entries between the processes,
 * so versions arrive out of order and are held), with injected handler
 * latency, and are killed with SIGKILL 8 times while the events flow; a
 * killed process's pending entries are taken over with XAUTOCLAIM. After
 * the drain every key's projection is at version 15, nothing is held, and
 * every event was applied once, in version order. Before the fix, keys
 * stayed held for good (`version N ... waits for version N-1` with N-1
 * applied). Real processes, real Redis, real PostgreSQL.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { uuidv7, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { encodeStreamFields } from 'txbox/redis';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/redis-projection-consumer.ts', import.meta.url));
const REDIS_URL = 'redis://127.0.0.1:6379';
const stream = `txbox-test:rhk-${randomBytes(4).toString('hex')}:items`;
const group = 'held-kills';
const KEYS = 20;
const VERSIONS = 15;
const KILLS = 8;
let db: TestDb;
let admin: Redis;

before(async () => {
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".proj (key text PRIMARY KEY, n int, version bigint NOT NULL)`);
  await db.query(`CREATE TABLE "${db.schema}".applied (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, version int NOT NULL)`);
  admin = new Redis(REDIS_URL, { lazyConnect: true });
  await admin.connect();
});
after(async () => {
  await admin.del(stream, `${stream}:dead`);
  await admin.quit();
  await db.close();
});

interface Running {
  readonly child: ChildProcess;
  settled(): number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startConsumer(name: string): Running {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, REDIS_URL, SCHEMA: db.schema, STREAM: stream, GROUP: group, CONSUMER_NAME: name, CLAIM_IDLE_MS: '500', HANDLER_DELAY_MS: '40', HELD_RECHECK_MS: '500', READ_COUNT: '4' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let settled = 0;
  child.stdout!.on('data', (d: Buffer) => (settled += (d.toString().match(/settled /g) ?? []).length));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, settled: () => settled, exited };
}

it(`two consumer processes killed ${KILLS} times: every held event is applied once its gap is filled`, { timeout: 240_000 }, async () => {
  const events: OutboxEvent[] = [];
  for (let v = 1; v <= VERSIONS; v++) {
    for (let k = 0; k < KEYS; k++) {
      events.push({ id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: `k${k}`, key: `Item:k${k}`, destination: 'items', payload: { v }, headers: {}, occurredAt: new Date(), version: v });
    }
  }
  const consumers: Running[] = [startConsumer('a'), startConsumer('b')];
  try {
    // Entries arrive while the processes run and die.
    const feeding = (async () => {
      for (const e of events) await admin.xadd(stream, '*', ...encodeStreamFields(e));
    })();
    for (let kill = 0; kill < KILLS; kill++) {
      const i = kill % 2;
      const victim = consumers[i]!;
      const before = victim.settled();
      await waitFor(`consumer ${i} settled a few more entries`, () => victim.settled() >= before + 5, 60_000);
      victim.child.kill('SIGKILL');
      assert.equal((await victim.exited).signal, 'SIGKILL');
      consumers[i] = startConsumer(i === 0 ? 'a' : 'b');
    }
    await feeding;
    await waitFor(
      'every key projected to its last version',
      async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".proj WHERE version = $1`, [VERSIONS]))[0]!.n === KEYS,
      120_000,
      200,
    );
    await waitFor('every entry acked', async () => ((await admin.xpending(stream, group)) as [number])[0] === 0, 60_000, 200);
  } finally {
    for (const c of consumers) c.child.kill('SIGTERM');
    await Promise.all(consumers.map((c) => c.exited));
  }
  const held = await db.query<{ last_error: string }>(`SELECT last_error FROM "${db.schema}".inbox WHERE status = 'held'`);
  assert.deepEqual(held, [], 'nothing stays held');
  const applied = await db.query<{ event_id: string; key: string; version: number }>(`SELECT event_id::text, key, version FROM "${db.schema}".applied ORDER BY seq`);
  assert.equal(new Set(applied.map((a) => a.event_id)).size, applied.length, 'nothing was applied twice');
  assert.equal(applied.length, events.length, 'every event was applied');
  const last = new Map<string, number>();
  for (const a of applied) {
    assert.equal(a.version, (last.get(a.key) ?? 0) + 1, `${a.key}: versions applied in order`);
    last.set(a.key, a.version);
  }
});
