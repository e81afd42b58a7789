/**
 * A KafkaConsumer process killed with kill -9 between its inbox commit and
 * its offset commit: the group gives its partitions to another consumer once
 * its session timed out, that consumer reads the record again and the inbox
 * skips it. The effect happens once. Also: SIGTERM stops a consumer process
 * gracefully (offsets committed, exit 0). Real processes, broker and PostgreSQL.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import { createInbox } from 'txbox';
import { KafkaConsumer } from 'txbox/kafka';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { applied, assertNoOpenHandles, BROKERS, createEffects, FAST_GROUP, item, newGroup, newTopic, publish, setUpKafka, uncommitted } from '../fixtures/kafka-consumer-helpers.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/kafka-consumer-process.ts', import.meta.url));
let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await createEffects(db);
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

function startProcess(topic: string, group: string, crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, SCHEMA: db.schema, TOPIC: topic, GROUP: group, CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const joined = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => d.toString().includes('joined') && resolve());
    void exited.then(({ code, signal }) => reject(new Error(`the consumer process exited before joining (${code ?? signal})`)));
  });
  return { child, joined, exited };
}

it('a consumer killed between the inbox commit and the offset commit: the next owner reads the record again and skips it', { timeout: 120_000 }, async () => {
  const topic = await newTopic(6, false);
  const groupId = newGroup();
  const e = item('crash', 1);

  const first = startProcess(topic, groupId, true);
  await first.joined;
  await publish(topic, [e]);
  assert.equal((await first.exited).signal, 'SIGKILL', 'the process killed itself after the commit');
  assert.equal((await applied(db, 'crash')).length, 1, 'the effect committed before the crash');
  assert.equal(await uncommitted(topic, groupId), 1, 'the offset was not committed');

  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'crash' });
  inbox.on('Changed', async (event, tx) => {
    await tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id, key, version, applied_by) VALUES ('crash', $1, $2, $3, 'second')`, [event.id, event.key, event.version]);
  });
  const second = new KafkaConsumer({ brokers: BROKERS, groupId, topics: [topic], fromBeginning: true, deadLetterTopic: null, inbox, ...FAST_GROUP });
  const seen: string[] = [];
  second.events.on('settled', (s) => s.id === e.id && seen.push(s.status));
  const started = Date.now();
  await second.start(); // joins once the dead member's session (6 s) timed out
  try {
    await waitFor('the record delivered again', () => seen.length > 0, 30_000);
    await waitFor('committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
  } finally {
    await second.stop();
  }
  assert.deepEqual(seen, ['duplicate'], 'the inbox skipped the redelivery');
  assert.ok(Date.now() - started >= 3000, 'the partitions moved only after the session timeout');
  assert.equal((await applied(db, 'crash')).length, 1, 'the effect happened once');
  const [row] = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = 'crash' AND event_id = $1`, [e.id]);
  assert.equal(row!.status, 'processed');
});

it('SIGTERM: the process commits what it applied, leaves the group and exits 0', { timeout: 60_000 }, async () => {
  const topic = await newTopic(6, false);
  const groupId = newGroup();
  const proc = startProcess(topic, groupId, false);
  await proc.joined;
  const events = [item('term-a', 1), item('term-b', 1), item('term-a', 2)];
  await publish(topic, events);
  await waitFor('applied', async () => (await applied(db, 'crash')).filter((r) => r.key.startsWith('Item:term-')).length >= 3, 20_000);
  proc.child.kill('SIGTERM');
  assert.deepEqual(await proc.exited, { code: 0, signal: null });
  assert.equal(await uncommitted(topic, groupId), 0, 'offsets committed before exit');
});
