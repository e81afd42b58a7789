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
import { createInbox, InboxQueue, uuidv7, type OutboxEvent } from 'txbox';
import { KafkaConsumer, type KafkaConsumerOptions } from 'txbox/kafka';
import { inboxNames, migrateInbox, migratePostgres, PostgresInboxStore, PostgresOutboxStore, postgresNames } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { assertNoOpenHandles, BROKERS, FAST_GROUP, newGroup, newTopic, publish, readTopic, setUpKafka, uncommitted } from '../fixtures/kafka-consumer-helpers.ts';

let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
  await db.query(`CREATE TABLE "${db.schema}".bodies (event_id uuid NOT NULL, consumer text NOT NULL, body jsonb NOT NULL)`);
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

const ev = (key: string, overrides: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: uuidv7(),
  type: 'Changed',
  aggregateType: 'Item',
  aggregateId: key,
  key: `Item:${key}`,
  destination: 'items',
  payload: { key },
  headers: {},
  occurredAt: new Date(),
  version: 1,
  ...overrides,
});

function hostile(): { bad: OutboxEvent[]; upper: OutboxEvent; good: OutboxEvent[] } {
  const bad = [ev('payload', { payload: { note: 'a\u0000b' } }), ev('nul-error', { type: 'Boom' }), ev('not-uuid', { id: 'order-17' }), ev('key', { key: 'Item:\u0000' })];
  const upper = ev('upper', { id: uuidv7().toUpperCase() });
  const good = [...['payload', 'nul-error', 'not-uuid', 'upper'].map((k) => ev(k, { version: 2 })), ...Array.from({ length: 8 }, (_, i) => ev(`ok${i}`))];
  return { bad, upper, good };
}

function consumerOf(options: Omit<KafkaConsumerOptions, 'brokers'>): KafkaConsumer {
  return new KafkaConsumer({ brokers: BROKERS, fromBeginning: true, ...FAST_GROUP, ...options });
}

describe('KafkaConsumer with input PostgreSQL refuses', { timeout: 180_000 }, () => {
  for (const keyConcurrency of [1, 4]) {
    it(`dead-letters each refused record naming the field and the partition flows on (keyConcurrency ${keyConcurrency})`, async () => {
      const topic = await newTopic(1);
      const groupId = newGroup();
      const name = `hostile-${keyConcurrency}`;
      const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: name, retry: { baseDelayMs: 20, maxDelayMs: 20, maxAttempts: 2 } });
      // What committed, not what ran: under group commit a batch with a failing handler is redone
      // one event at a time, so a handler can run again after its first run rolled back.
      const applied = async (): Promise<string[]> =>
        (await db.query<{ id: string }>(`SELECT event_id::text AS id FROM "${db.schema}".bodies WHERE consumer = $1`, [name])).map((r) => r.id);
      const handler = async (event: OutboxEvent, tx: { query(text: string, params?: unknown[]): Promise<unknown> }): Promise<void> => {
        if (event.type === 'Boom') throw new Error('refused \u0000 byte');
        await tx.query(`INSERT INTO "${db.schema}".bodies (event_id, consumer, body) VALUES ($1, $2, $3::jsonb)`, [event.id, name, JSON.stringify(event.payload)]);
      };
      inbox.on('Changed', handler).on('Boom', handler);
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
