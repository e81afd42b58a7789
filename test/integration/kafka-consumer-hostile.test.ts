/**
 * Hostile input through the real Kafka broker and PostgreSQL (issue 11 items
 * 1, 2): records PostgreSQL refuses (a payload with \u0000, an id that is not
 * a UUID, a key with NUL) and a handler whose error holds NUL made
 * `inbox.process` reject, which the consumer took for "database down" and
 * retried in place forever, so the partition stopped; an upper-case id was
 * committed as a duplicate without running. Now each refused record is
 * dead-lettered with a reason naming the field, the upper-case id runs once,
 * and every later record of the partition is applied and committed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { InboxQueue } from 'txbox';
import { KafkaConsumer, type KafkaConsumerOptions } from 'txbox/kafka';
import { migratePostgres, PostgresOutboxStore, postgresNames } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { eventMaker, hostileEvents, hostileInbox, setUpHostileTables } from '../fixtures/hostile-inbox.ts';
import { assertNoOpenHandles, BROKERS, FAST_GROUP, newGroup, newTopic, publish, readTopic, setUpKafka, uncommitted } from '../fixtures/kafka-consumer-helpers.ts';

let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
  db = await openDb('postgres');
  await setUpHostileTables(db);
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

const ev = eventMaker('Item');
const hostile = (): ReturnType<typeof hostileEvents> => hostileEvents(ev, 'Item');

function consumerOf(options: Omit<KafkaConsumerOptions, 'brokers'>): KafkaConsumer {
  return new KafkaConsumer({ brokers: BROKERS, fromBeginning: true, ...FAST_GROUP, ...options });
}

describe('KafkaConsumer with input PostgreSQL refuses', { timeout: 180_000 }, () => {
  for (const keyConcurrency of [1, 4]) {
    it(`dead-letters each refused record naming the field and the partition flows on (keyConcurrency ${keyConcurrency})`, async () => {
      const topic = await newTopic(1);
      const groupId = newGroup();
      const name = `hostile-${keyConcurrency}`;
      const { inbox, applied } = hostileInbox(db, name, 'Changed');
      const { bad, upper, good } = hostile();
      // In this order on the one partition: the refused records come first.
      for (const e of [...bad, upper, ...good]) await publish(topic, [e]);
      const consumer = consumerOf({ groupId, topics: [topic], inbox, keyConcurrency });
      await consumer.start();
      try {
        await waitFor('every later record applied', async () => (await applied()).length === good.length + 1, 60_000);
        await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 30_000);
      } finally {
        await consumer.stop();
      }
      const ran = await applied();
      assert.ok(ran.includes(upper.id.toLowerCase()), 'the upper-case id ran (as its canonical form)');
      assert.equal(new Set(ran).size, ran.length, 'nothing applied twice');
      const dead = await readTopic(`${topic}.dead`, bad.length);
      const reasons = dead.map((m) => m.headers?.['txbox-dead-reason']?.toString() ?? '');
      assert.equal(reasons.length, 4, reasons.join('\n'));
      assert.ok(reasons.some((r) => /id: "order-17" is not a UUID/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /key: contains a NUL/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /payload\.note: contains "\\u0000"/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /refused \ufffd byte/.test(r)), reasons.join('\n'));
    });
  }

  it('worker mode: a refused record no longer stops its chunk; it is dead-lettered and the others are queued', async () => {
    const topic = await newTopic(1);
    const groupId = newGroup();
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const { bad, good } = hostile();
    const refused = bad.filter((e) => e.type !== 'Boom');
    for (const e of [...good.slice(0, 3), ...refused, ...good.slice(3)]) await publish(topic, [e]);
    const consumer = consumerOf({ groupId, topics: [topic], queue });
    await consumer.start();
    try {
      await waitFor('the good records queued', () => consumer.stats.queued === good.length, 60_000);
      await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 30_000);
    } finally {
      await consumer.stop();
    }
    assert.equal(consumer.stats.rejected, refused.length);
    const [queued] = await db.query<{ rows: number }>(`SELECT count(*)::int AS rows FROM "${db.schema}".inbox_queue`);
    assert.equal(queued!.rows, good.length);
  });

  it('worker mode: a record the queue table refuses (a constraint: SQLSTATE 23514) is found in its chunk and dead-lettered; the others are queued', async () => {
    const topic = await newTopic(1);
    const groupId = newGroup();
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'refusing_queue' }));
    await db.query(`ALTER TABLE "${db.schema}".refusing_queue ADD CONSTRAINT no_refused CHECK (type <> 'Refused')`);
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'refusing_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const refused = ev('refused', { type: 'Refused' });
    const good = Array.from({ length: 10 }, (_, i) => ev(`q${i}`));
    await publish(topic, [...good.slice(0, 5), refused, ...good.slice(5)]);
    const consumer = consumerOf({ groupId, topics: [topic], queue });
    await consumer.start();
    try {
      await waitFor('the good records queued', () => consumer.stats.queued === good.length, 60_000);
      await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 30_000);
    } finally {
      await consumer.stop();
    }
    assert.equal(consumer.stats.rejected, 1);
    const dead = await readTopic(`${topic}.dead`, 1);
    assert.match(dead[0]!.headers?.['txbox-dead-reason']?.toString() ?? '', /the inbox queue refused it: SQLSTATE 23514/);
  });
});
