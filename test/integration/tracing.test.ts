/**
 * OpenTelemetry end to end with the SDK's in-memory exporter: one trace from
 * the producer's span through the relay's publish span to the consumer's
 * span, in which the handler runs, over HTTP webhooks, RabbitMQ, NATS
 * JetStream and Redis Streams (Kafka: tracing-kafka.test.ts), each with
 * txbox's consumer and an inbox on PostgreSQL.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { connect as amqpConnect } from 'amqplib';
import { Redis } from 'ioredis';
import { HttpTransport, createWebhookConsumer, generateWebhookSecret } from 'txbox/http';
import { NatsConsumer } from 'txbox/nats';
import { RabbitMqConsumer, RabbitMqTransport } from 'txbox/rabbitmq';
import { RedisConsumer, RedisTransport } from 'txbox/redis';
import type { TestDb } from '../helpers/databases.ts';
import { JetStreamAdmin } from '../fixtures/nats-consumer-helpers.ts';
import { assertOneTrace, produce, recordingInbox, registerOtel, relayUntilHandled, tracingDb } from '../fixtures/tracing-harness.ts';
import { holdBrokerLock } from '../helpers/broker-lock.ts';

const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
const REDIS_URL = 'redis://127.0.0.1:6379';
const run = randomBytes(4).toString('hex');

let db: TestDb;
before(async () => {
  registerOtel();
  db = await tracingDb();
});
after(async () => {
  await db.close();
});

describe('one trace from producer to handler', { timeout: 120_000 }, () => {
  it('HTTP webhooks (HttpTransport -> webhook consumer)', async () => {
    const secret = generateWebhookSecret();
    const { inbox, runs } = recordingInbox(db, 'http');
    const server = await createWebhookConsumer({ inbox, secret }).listen({ port: 0 });
    const transport = new HttpTransport({ endpoints: { items: `${server.url}/items` }, secret });
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'http');
    } finally {
      await transport.close();
      await server.close();
      inbox.stop();
    }
  });

  it('RabbitMQ (RabbitMqTransport -> RabbitMqConsumer)', async () => {
    // Other files stop the shared broker (stop_app): take turns with them.
    const release = await holdBrokerLock('rabbitmq');
    try {
      await rabbitCase();
    } finally {
      release();
    }
  });

  async function rabbitCase(): Promise<void> {
    const queue = `txbox_trace_${run}`;
    const admin = await amqpConnect(AMQP_URL);
    const channel = await admin.createChannel();
    await channel.assertQueue(queue, { durable: true });
    const { inbox, runs } = recordingInbox(db, 'rabbitmq');
    const consumer = new RabbitMqConsumer({ url: AMQP_URL, queues: queue, inbox });
    const transport = new RabbitMqTransport({ url: AMQP_URL, destinations: { items: { routingKey: queue } } });
    await consumer.start();
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'rabbitmq');
    } finally {
      await transport.close();
      await consumer.stop();
      inbox.stop();
      for (const q of [queue, `${queue}.dead`]) await channel.deleteQueue(q).catch(() => {});
      await channel.deleteExchange(`${queue}.dlx`).catch(() => {});
      await admin.close();
    }
  }

  it('NATS JetStream (NatsTransport -> NatsConsumer)', async () => {
    const admin = await JetStreamAdmin.open();
    const streams = await admin.streams();
    const { inbox, runs } = recordingInbox(db, 'nats');
    const consumer = new NatsConsumer({ stream: streams.stream, durable: 'traced', inbox });
    const transport = streams.transport();
    await consumer.start();
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'nats');
    } finally {
      await transport.close();
      await consumer.stop();
      inbox.stop();
      await streams.delete();
      await admin.close();
    }
  });

  it('Redis Streams (RedisTransport -> RedisConsumer), the trace context also as entry fields', async () => {
    const stream = `txbox:trace:${run}`;
    const { inbox, runs } = recordingInbox(db, 'redis');
    const consumer = new RedisConsumer({ url: REDIS_URL, streams: { items: stream }, group: 'traced', inbox, blockMs: 200 });
    const transport = new RedisTransport({ url: REDIS_URL, streams: { items: stream } });
    const admin = new Redis(REDIS_URL);
    await consumer.start();
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'redis');
      const [[, fields]] = (await admin.xrange(stream, '-', '+')) as [[string, string[]]];
      const traceparent = fields[fields.indexOf('traceparent') + 1];
      assert.match(traceparent ?? '', new RegExp(`^00-${producer.traceId}-[0-9a-f]{16}-01$`), 'traceparent is a field of the entry');
    } finally {
      await transport.close();
      await consumer.stop();
      inbox.stop();
      await admin.del(stream);
      admin.disconnect();
    }
  });
});
