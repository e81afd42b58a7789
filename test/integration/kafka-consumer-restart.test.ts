/**
 * KafkaConsumer across a broker restart: the broker is killed with kill -9
 * while the consumer is applying events and started again; the same consumer
 * (no new start()) reconnects, rejoins its group and applies the rest. Every
 * event is applied once, in per-key order, and every offset ends committed.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, it } from 'node:test';
import { createInbox } from 'txbox';
import { KafkaConsumer } from 'txbox/kafka';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { applied, assertNoOpenHandles, BROKERS, checkApplied, createEffects, FAST_GROUP, itemEvents, newGroup, newTopic, publish, setUpKafka, uncommitted } from '../fixtures/kafka-consumer-helpers.ts';

const SCRIPTS = new URL('../../scripts/kafka/', import.meta.url).pathname;
const script = (name: string): void => void execFileSync('bash', [join(SCRIPTS, name)], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 240_000 });
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

it('reconnects by itself after the broker was killed and restarted; every event applied once, in order', { timeout: 240_000 }, async () => {
  const topic = await newTopic(6, false);
  const groupId = newGroup();
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'restart' });
  inbox.on('Changed', async (event, tx) => {
    await sleep(2);
    await tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id, key, version) VALUES ('restart', $1, $2, $3)`, [event.id, event.key, event.version]);
  });
  const consumer = new KafkaConsumer({ brokers: BROKERS, groupId, topics: [topic], fromBeginning: true, deadLetterTopic: null, inbox, ...FAST_GROUP });
  const events = itemEvents(20, 30);
  const half = events.length / 2;
  await consumer.start();
  try {
    await publish(topic, events.slice(0, half));
    await waitFor('some applied', async () => (await applied(db, 'restart')).length >= 50, 30_000);
    script('kill.sh');
    const appliedDuringOutage = (await applied(db, 'restart')).length;
    script('up.sh');
    await publish(topic, events.slice(half));
    await waitFor('all applied after the restart', async () => (await applied(db, 'restart')).length >= events.length, 120_000);
    await waitFor('every offset committed', async () => (await uncommitted(topic, groupId).catch(() => -1)) === 0, 60_000);
    assert.ok(appliedDuringOutage < events.length);
  } finally {
    await consumer.stop();
  }
  const rows = await applied(db, 'restart');
  assert.equal(rows.length, events.length);
  assert.deepEqual(checkApplied(rows), { duplicates: 0, outOfOrder: 0 });
});
