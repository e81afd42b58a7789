/**
 * `health()` of the broker consumers, through the shared consumer core,
 * against the real brokers: not live before start, live and ready while
 * running, not live after stop; a retried inbox failure shows as a failed
 * `last-error` check until the inbox works again. One stream, queue or
 * durable per test, removed afterwards.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { createInbox, type Consumer, type HealthSource, type Inbox } from 'txbox';
import { NatsConsumer } from 'txbox/nats';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { RabbitMqConsumer } from 'txbox/rabbitmq';
import { RedisConsumer, RedisTransport } from 'txbox/redis';
import { JetStreamAdmin, item } from '../fixtures/nats-consumer-helpers.ts';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { holdBrokerLock } from '../helpers/broker-lock.ts';

const run = randomBytes(4).toString('hex');
let db: TestDb;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
});
after(() => db.close());

function inboxFor(name: string): Inbox {
  return createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: name });
}

async function lifecycle(consumer: Consumer & HealthSource): Promise<void> {
  assert.equal((await consumer.health()).live, false, 'not live before start');
  await consumer.start();
  try {
    const h = await consumer.health();
    assert.deepEqual([h.live, h.ready], [true, true], JSON.stringify(h));
    assert.deepEqual(h.checks.map((c) => [c.name, c.ok]), [['running', true], ['connection', true]]);
  } finally {
    await consumer.stop();
  }
  const h = await consumer.health();
  assert.deepEqual([h.live, h.ready], [false, false]);
}

describe('consumer health()', () => {
  it('RabbitMQ', async () => {
    const queue = `txbox-health-${run}`;
    // Other files stop the shared broker (stop_app): take turns with them.
    const release = await holdBrokerLock('rabbitmq');
    try {
      await rabbitCase(queue);
    } finally {
      release();
    }
  });

  async function rabbitCase(queue: string): Promise<void> {
    await lifecycle(new RabbitMqConsumer({ url: 'amqp://guest:guest@127.0.0.1:5672', queues: [queue], inbox: inboxFor('rabbit'), assertQueues: true }));
    const amqp = await import('amqplib');
    const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
    const ch = await conn.createChannel();
    for (const q of [queue, `${queue}.dead`]) await ch.deleteQueue(q).catch(() => {});
    await conn.close();
  }

  it('NATS', async () => {
    const admin = await JetStreamAdmin.open();
    const s = await admin.streams();
    try {
      await lifecycle(new NatsConsumer({ stream: s.stream, durable: 'health', inbox: inboxFor('nats') }));
    } finally {
      await s.delete();
      await admin.close();
    }
  });

  it('Redis, and a retried inbox failure as last-error until it recovers', async () => {
    const stream = `txbox-test:health-${run}`;
    const inbox = inboxFor('redis');
    let failing = true;
    const process = inbox.process.bind(inbox);
    inbox.process = async (event) => {
      if (failing) throw new Error('the inbox store is down');
      return process(event);
    };
    const consumer = new RedisConsumer({ url: 'redis://127.0.0.1:6379', streams: { items: stream }, group: 'health', blockMs: 200, inbox });
    await lifecycle(consumer);
    const transport = new RedisTransport({ url: 'redis://127.0.0.1:6379', streams: { items: stream } });
    await consumer.start();
    try {
      await transport.publish([{ ...item('h', 1), destination: 'items' }], AbortSignal.timeout(5000));
      await waitFor('a failed inbox call', async () => (await consumer.health()).checks.some((c) => c.name === 'last-error'));
      const h = await consumer.health();
      assert.match(h.checks.find((c) => c.name === 'last-error')!.detail!, /^inbox failed at .*the inbox store is down/);
      assert.equal(h.live, true);
      failing = false;
      await waitFor('settled', () => consumer.stats.ignored === 1);
      assert.equal((await consumer.health()).checks.some((c) => c.name === 'last-error'), false, 'recovered');
    } finally {
      await consumer.stop();
      await transport.close();
      const r = new Redis('redis://127.0.0.1:6379');
      await r.del(stream);
      r.disconnect();
    }
  });
});
