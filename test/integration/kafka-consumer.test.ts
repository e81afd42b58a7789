/**
 * KafkaConsumer against the real broker of scripts/kafka and PostgreSQL:
 * events published with KafkaTransport to 6-partition topics are applied once
 * in per-key order with partitions in parallel (also with several keys of a
 * partition at once); a record produced three times is applied once; a
 * poison event is dead-lettered after its attempts while the other partitions
 * keep flowing, and an unreadable record is dead-lettered and committed past;
 * worker mode; start-up errors naming the setting.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createInbox, createInboxWorker, InboxQueue, type Inbox, type OutboxEvent } from 'txbox';
import { ConfigError } from 'txbox';
import { KafkaConsumer, type KafkaConsumerOptions } from 'txbox/kafka';
import { inboxNames, migrateInbox, migratePostgres, PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, postgresNames } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { startWhileUnreachable } from '../helpers/outage.ts';
import {
  applied,
  assertNoOpenHandles,
  BROKERS,
  checkApplied,
  createEffects,
  FAST_GROUP,
  item,
  itemEvents,
  newGroup,
  newTopic,
  produceRaw,
  publish,
  readTopic,
  setUpKafka,
  uncommitted,
} from '../fixtures/kafka-consumer-helpers.ts';

let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
  await createEffects(db);
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

/** An inbox whose handler records each event in `effects` (in the handler's transaction). */
function effectsInbox(consumer: string, options: { retry?: { baseDelayMs: number; maxAttempts: number }; before?: (e: OutboxEvent) => Promise<void> | void } = {}): Inbox {
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer, ...(options.retry ? { retry: { ...options.retry, maxDelayMs: 60_000 } } : {}) });
  const handler = async (event: OutboxEvent, tx: { query(text: string, params?: unknown[]): Promise<unknown> }): Promise<void> => {
    await options.before?.(event);
    await tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id, key, version) VALUES ($1, $2, $3, $4)`, [consumer, event.id, event.key, event.version]);
  };
  inbox.on('Changed', handler);
  inbox.on('Poison', handler);
  return inbox;
}

function consumerOf(options: Omit<KafkaConsumerOptions, 'brokers'>): KafkaConsumer {
  return new KafkaConsumer({ brokers: BROKERS, fromBeginning: true, ...FAST_GROUP, ...options });
}

describe('KafkaConsumer', { timeout: 180_000 }, () => {
  for (const keyConcurrency of [1, 4]) {
    it(`applies events once, in per-key order, partitions in parallel (keyConcurrency ${keyConcurrency})`, async () => {
      const topic = await newTopic(6);
      const groupId = newGroup();
      const name = `order-${keyConcurrency}`;
      let running = 0;
      let most = 0;
      const failures = new Map<string, number>();
      const inbox = effectsInbox(name, {
        retry: { baseDelayMs: 20, maxAttempts: 5 },
        before: async (e) => {
          running++;
          most = Math.max(most, running);
          try {
            await new Promise((r) => setTimeout(r, 2));
            // Version 5 of every 7th key fails twice (the inbox may group it with others first): retried in place, its key waits.
            const failed = failures.get(e.id) ?? 0;
            if (e.version === 5 && Number(e.aggregateId.slice(1)) % 7 === 0 && failed < 2) {
              failures.set(e.id, failed + 1);
              throw new Error('flaky');
            }
          } finally {
            running--;
          }
        },
      });
      const consumer = consumerOf({ groupId, topics: [topic], inbox, keyConcurrency });
      await consumer.start();
      try {
        assert.deepEqual([...(consumer.assignment[topic] ?? [])].sort(), [0, 1, 2, 3, 4, 5], 'one process owns all 6 partitions');
        const events = itemEvents(30, 20);
        await publish(topic, events);
        await waitFor('all 600 applied', async () => (await applied(db, name)).length >= events.length, 60_000);
        await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
      } finally {
        await consumer.stop();
      }
      const rows = await applied(db, name);
      assert.equal(rows.length, 600);
      assert.deepEqual(checkApplied(rows), { duplicates: 0, outOfOrder: 0 });
      assert.ok(failures.size === 5 && consumer.stats.retried >= failures.size, `flaky handlers were retried (${failures.size} failed, ${consumer.stats.retried} retries)`);
      assert.ok(most >= 2, `handlers ran in parallel (at most ${most} at once)`);
      assert.equal(consumer.stats.processed, 600);
    });
  }

  it('a record produced three times is applied once', async () => {
    const topic = await newTopic(6);
    const groupId = newGroup();
    const inbox = effectsInbox('thrice');
    const consumer = consumerOf({ groupId, topics: [topic], inbox });
    const statuses: string[] = [];
    consumer.events.on('settled', (s) => statuses.push(s.status));
    await consumer.start();
    try {
      const e = item('x', 1);
      for (let i = 0; i < 3; i++) await publish(topic, [e]);
      await waitFor('three deliveries settled', () => statuses.length >= 3, 30_000);
      await waitFor('committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual(statuses.sort(), ['duplicate', 'duplicate', 'processed']);
    assert.equal((await applied(db, 'thrice')).length, 1);
  });

  it('a poison event is dead-lettered after its attempts while other partitions flow; an unreadable record is dead-lettered and committed past', async () => {
    const topic = await newTopic(6);
    const groupId = newGroup();
    const name = 'poison';
    const inbox = effectsInbox(name, {
      // Retries due after more than a second: the partition is paused (not waited in) between attempts.
      retry: { baseDelayMs: 2400, maxAttempts: 3 },
      before: (e) => {
        if (e.type === 'Poison') throw new Error('cannot apply this one');
      },
    });
    const consumer = consumerOf({ groupId, topics: [topic], inbox });
    const settledAt = new Map<string, { at: number; partition: number }>();
    let deadAt = 0;
    let poisonPartition = -1;
    consumer.events.on('settled', (s) => settledAt.set(s.id, { at: Date.now(), partition: s.partition }));
    consumer.events.on('paused', (p) => (poisonPartition = p.partition));
    consumer.events.on('deadLettered', () => (deadAt = Date.now()));
    await consumer.start();
    const poison = item('p', 1, 'Poison');
    const after = [item('p', 2), item('p', 3)];
    const others = itemEvents(24, 5, 'o');
    try {
      await publish(topic, [poison]);
      await waitFor('the poison failed and paused its partition', () => poisonPartition >= 0, 15_000);
      await produceRaw(topic, (poisonPartition + 1) % 6, ['not a txbox event']);
      await publish(topic, [...after, ...others]);
      await waitFor('dead-lettered', () => deadAt > 0, 30_000);
      await waitFor('all applied', async () => (await applied(db, name)).length >= 2 + others.length, 30_000);
      await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
    } finally {
      await consumer.stop();
    }
    // Every event in another partition was applied while the poison still waited for its attempts.
    const elsewhere = others.filter((e) => settledAt.get(e.id)!.partition !== poisonPartition);
    assert.ok(elsewhere.length > 0);
    for (const e of elsewhere) assert.ok(settledAt.get(e.id)!.at < deadAt, 'other partitions kept flowing');
    // Its own key's next events waited for it, and kept their order.
    for (const e of after) assert.ok(settledAt.get(e.id)!.at > deadAt, "the poison's key waited");
    const rows = await applied(db, name);
    assert.deepEqual(checkApplied(rows), { duplicates: 0, outOfOrder: 0 });
    assert.equal(rows.filter((r) => r.key === 'Item:p').map((r) => r.version).join(), '2,3');
    assert.ok(consumer.stats.paused >= 2, 'both retries paused the partition');
    const [row] = await db.query<{ status: string; attempts: number }>(`SELECT status, attempts FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`, [name, poison.id]);
    assert.deepEqual(row, { status: 'dead', attempts: 3 });

    const dead = await readTopic(`${topic}.dead`, 2);
    assert.equal(dead.length, 2);
    const header = (m: (typeof dead)[number], name: string): string | undefined => m.headers?.[name]?.toString();
    const copy = dead.find((m) => header(m, 'txbox-id') === poison.id)!;
    assert.ok(copy, 'the dead event is in the dead-letter topic');
    assert.match(header(copy, 'txbox-dead-reason')!, /cannot apply this one/);
    assert.equal(header(copy, 'txbox-dead-attempts'), '3');
    assert.equal(header(copy, 'txbox-dead-topic'), topic);
    assert.equal(header(copy, 'txbox-dead-group'), groupId);
    assert.equal(copy.key?.toString(), 'Item:p');
    const raw = dead.find((m) => m.value?.toString() === 'not a txbox event')!;
    assert.ok(raw, 'the unreadable record is in the dead-letter topic');
    assert.match(header(raw, 'txbox-dead-reason')!, /^unreadable record: the message has no "txbox-id" header/);
    assert.equal(consumer.stats.rejected, 1);
  });

  it('worker mode: records are stored in the inbox queue and committed; workers apply them once in per-key order', async () => {
    const topic = await newTopic(6);
    const groupId = newGroup();
    const name = 'worker';
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const consumer = consumerOf({ groupId, topics: [topic], queue });
    const events = itemEvents(20, 10);
    await consumer.start();
    try {
      await publish(topic, events);
      await publish(topic, events.slice(0, 30)); // redeliveries
      await waitFor('all queued', () => consumer.stats.queued >= events.length + 30, 30_000);
      await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
    } finally {
      await consumer.stop();
    }
    assert.equal((await applied(db, name)).length, 0, 'receiving ran no handler');
    const inbox = effectsInbox(name);
    const workers = [0, 1].map(() =>
      createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30, leaseTtlMs: 3000 }),
    );
    for (const w of workers) await w.start();
    try {
      await waitFor('all applied', async () => (await applied(db, name)).length >= events.length, 60_000);
    } finally {
      for (const w of workers) await w.stop();
    }
    const committed = new Map<string, string[]>();
    for (const e of events) committed.set(e.key, [...(committed.get(e.key) ?? []), e.id]);
    const report = checkDeliveries(committed, await applied(db, name));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
  });

  it('stop() lets a running handler commit, commits its offset, then leaves the group', async () => {
    const topic = await newTopic(6, false);
    const groupId = newGroup();
    let started = false;
    const inbox = effectsInbox('stop', {
      before: async () => {
        started = true;
        await new Promise((r) => setTimeout(r, 1500));
      },
    });
    const consumer = consumerOf({ groupId, topics: [topic], inbox, deadLetterTopic: null });
    await consumer.start();
    await publish(topic, [item('slow', 1)]);
    await waitFor('the handler runs', () => started, 15_000);
    const stopping = Date.now();
    await consumer.stop();
    assert.ok(Date.now() - stopping >= 1000, 'stop() waited for the handler');
    assert.equal((await applied(db, 'stop')).length, 1);
    assert.equal(await uncommitted(topic, groupId), 0, 'its offset was committed before leaving');
  });

  it('start() names the setting to fix, never a credential', async () => {
    const topic = await newTopic(1, false);
    const inbox = effectsInbox('config');
    const cases: [Partial<KafkaConsumerOptions>, string, RegExp][] = [
      [{ topics: [`${topic}-missing`] }, 'topics', /does not exist/],
      [{}, 'deadLetterTopic', new RegExp(`${topic}\\.dead" does not exist`)],
      [{ sasl: { mechanism: 'scram-sha-512', username: 'billing', password: 'hunter2' } }, 'sasl', /SASL/],
      [{ sessionTimeoutMs: 1000, heartbeatIntervalMs: 300 }, 'sessionTimeoutMs', /group.min.session.timeout.ms/],
    ];
    for (const [options, field, message] of cases) {
      const consumer = new KafkaConsumer({ brokers: BROKERS, groupId: newGroup(), topics: [topic], inbox, ...(field === 'deadLetterTopic' ? {} : { deadLetterTopic: null }), ...options } as KafkaConsumerOptions);
      const err = await consumer.start().then(
        () => null,
        (e: unknown) => e,
      );
      await consumer.stop();
      assert.ok(err instanceof ConfigError, `${field}: ${String(err)}`);
      assert.equal(err.field, field);
      assert.match(err.message, message);
      assert.doesNotMatch(err.message, /hunter2/);
    }
    // Nothing answers at brokers: an outage, not a configuration error; start() keeps trying, naming brokers.
    const waiting = new KafkaConsumer({ brokers: ['127.0.0.1:1'], connectionTimeoutMs: 500, groupId: newGroup(), topics: [topic], inbox, deadLetterTopic: null });
    assert.match(await startWhileUnreachable(waiting), /brokers: could not connect .*check brokers/);
    assert.throws(() => new KafkaConsumer({ groupId: 'g', topics: [topic] } as KafkaConsumerOptions), { field: 'inbox' });
    assert.throws(() => new KafkaConsumer({ groupId: 'g', inbox }), { field: 'topics' });
    assert.throws(() => new KafkaConsumer({ groupId: 'g', topics: [topic], inbox, deadLetterTopic: '{topic}' }), { field: 'deadLetterTopic' });
    assert.throws(() => new KafkaConsumer({ groupId: 'g', topics: [topic], inbox, heartbeatIntervalMs: 9000, sessionTimeoutMs: 6000 }), { field: 'heartbeatIntervalMs' });
  });
});
