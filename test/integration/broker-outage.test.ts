/**
 * A broker that does not answer when the relay or the consumer starts
 * (docs/operations.md, "Broker down at start"): for Kafka, RabbitMQ, NATS,
 * Redis, Pub/Sub and SQS, a relay and a consumer started while their
 * broker's address refuses connections (a local TCP proxy, closed) both
 * start: the relay warns naming the transport and its events wait (pending,
 * not parked), the consumer keeps retrying, unready; once the proxy opens,
 * every event is applied once. The shared brokers are never stopped: only
 * the proxy in front of them is. Plus: stop() ends a consumer's wait, and a
 * configuration error still rejects start() at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createInbox, createOutbox, createRelay, defineEvent, payloadType, type Consumer, type HealthSource, type Inbox, type Logger, type Transport } from 'txbox';
import { inboxNames, migrateInbox, PostgresOutboxStore, PostgresInboxStore, PostgresRelayStore } from 'txbox/postgres';
import { KafkaConsumer, KafkaTransport } from 'txbox/kafka';
import { RabbitMqConsumer, RabbitMqTransport } from 'txbox/rabbitmq';
import { NatsConsumer, NatsTransport } from 'txbox/nats';
import { RedisConsumer, RedisTransport } from 'txbox/redis';
import { PubSubConsumer, PubSubTransport } from 'txbox/pubsub';
import { SqsConsumer, SqsTransport } from 'txbox/sqs';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';
import { closeKafkaAdmin, FAST_GROUP, newGroup, newTopic } from '../fixtures/kafka-consumer-helpers.ts';
import { TestBroker } from '../fixtures/rabbitmq-consumer-broker.ts';
import { holdBrokerLock } from '../helpers/broker-lock.ts';
import { JetStreamAdmin } from '../fixtures/nats-consumer-helpers.ts';
import { adminClient as pubsubAdmin, EMULATOR_HOST, emulatorSkip, PROJECT } from '../helpers/pubsub.ts';
import { createQueue, deleteQueues, sqsClient, SQS_PORT, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';

const run = randomBytes(3).toString('hex');
const EVENTS = 10;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Lines extends Logger {
  readonly lines: { level: string; obj: Record<string, unknown>; msg: string }[];
}
function recordingLogger(): Lines {
  const lines: Lines['lines'] = [];
  const at = (level: string) => (obj: object, msg?: string) => void lines.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
  return { lines, debug: () => {}, info: at('info'), warn: at('warn'), error: at('error') };
}

/** What a broker case sets up behind the proxy on `port`: where events go, the transport, and a consumer of it. */
interface Setup {
  readonly destination: string;
  readonly transport: Transport;
  consumer(inbox: Inbox): Consumer & HealthSource;
  cleanup(): Promise<void>;
}

interface Case {
  readonly name: string;
  /** The real broker's port, behind the proxy. */
  readonly port: number;
  skip?(): Promise<string | false>;
  setup(port: number, logger: Logger): Promise<Setup>;
}

const rabbit = new TestBroker();
/** Brokers that other test files stop or kill (their files hold holdBrokerLock too). */
const SHARED_BROKERS = new Set(['kafka', 'rabbitmq']);

const CASES: Case[] = [
  {
    name: 'kafka',
    port: 9092,
    async setup(port, logger) {
      // The proxy is the bootstrap address; the cluster's metadata then points the clients at 127.0.0.1:9092 itself.
      const topic = await newTopic(2, false);
      const brokers = [`127.0.0.1:${port}`];
      return {
        destination: 'items',
        transport: new KafkaTransport({ brokers, topics: { items: topic }, connectionTimeoutMs: 1000, logger }),
        consumer: (inbox) => new KafkaConsumer({ brokers, groupId: newGroup(), topics: [topic], fromBeginning: true, deadLetterTopic: null, inbox, ...FAST_GROUP }),
        cleanup: async () => {},
      };
    },
  },
  {
    name: 'rabbitmq',
    port: 5672,
    async setup(port, logger) {
      const queue = await rabbit.queue();
      const url = `amqp://guest:guest@127.0.0.1:${port}`;
      // Destination = queue name, through the default exchange.
      return {
        destination: queue,
        transport: new RabbitMqTransport({ url, logger, reconnectInitialDelayMs: 100, reconnectMaxDelayMs: 500 }),
        consumer: (inbox) => new RabbitMqConsumer({ url, queues: [queue], inbox, reconnectInitialDelayMs: 100, reconnectMaxDelayMs: 500, stopTimeoutMs: 5000 }),
        cleanup: async () => {},
      };
    },
  },
  {
    name: 'nats',
    port: 4222,
    async setup(port, logger) {
      const admin = await JetStreamAdmin.open();
      const s = await admin.streams();
      const servers = `127.0.0.1:${port}`;
      return {
        destination: 'items',
        transport: new NatsTransport({ servers, subjectPrefix: s.subjectPrefix, streams: { items: s.stream }, reconnectTimeWaitMs: 100, connectTimeoutMs: 1000, logger }),
        consumer: (inbox) => new NatsConsumer({ servers, stream: s.stream, durable: `outage_${run}`, inbox, deadLetterSubject: null }),
        cleanup: async () => {
          await s.delete();
          await admin.close();
        },
      };
    },
  },
  {
    name: 'redis',
    port: 6379,
    async setup(port, logger) {
      const stream = `txbox-test:outage-${run}`;
      const url = `redis://127.0.0.1:${port}`;
      return {
        destination: 'items',
        transport: new RedisTransport({ url, streams: { items: stream }, logger }),
        consumer: (inbox) => new RedisConsumer({ url, streams: { items: stream }, group: `outage-${run}`, blockMs: 200, inbox }),
        cleanup: async () => {
          const { Redis } = await import('ioredis');
          const r = new Redis('redis://127.0.0.1:6379');
          await r.del(stream);
          r.disconnect();
        },
      };
    },
  },
  {
    name: 'pubsub',
    port: Number(EMULATOR_HOST.slice(EMULATOR_HOST.lastIndexOf(':') + 1)),
    skip: emulatorSkip,
    async setup(port, logger) {
      const admin = pubsubAdmin();
      const [topic] = await admin.createTopic(`outage-${run}`);
      const [sub] = await topic.createSubscription(`outage-${run}-sub`, { enableMessageOrdering: true });
      const emulatorHost = `127.0.0.1:${port}`;
      return {
        destination: 'items',
        transport: new PubSubTransport({ projectId: PROJECT, emulatorHost, topics: { items: topic.name.split('/').pop()! }, connectTimeoutMs: 2000, logger }),
        consumer: (inbox) => new PubSubConsumer({ projectId: PROJECT, emulatorHost, subscription: sub.name.split('/').pop()!, destination: 'items', connectTimeoutMs: 2000, stopTimeoutMs: 5000, inbox }),
        cleanup: async () => {
          await sub.delete().catch(() => {});
          await topic.delete().catch(() => {});
          await admin.close();
        },
      };
    },
  },
  {
    name: 'sqs',
    port: SQS_PORT,
    async setup(port, logger) {
      const client = sqsClient();
      // ElasticMQ finds a queue by its path, so a URL on the proxy's port reaches it through the proxy.
      const url = await createQueue(client, uniqueQueueName(`outage-${run}`, true), {}, port);
      // A FIFO queue without a redrive policy needs a dead-letter queue of the consumer's own.
      const dead = await createQueue(client, uniqueQueueName(`outage-${run}-dead`, true), {}, port);
      const aws = { region: 'us-east-1', endpoint: `http://127.0.0.1:${port}`, credentials: TEST_CREDENTIALS };
      return {
        destination: 'items',
        transport: new SqsTransport({ queues: { items: url }, ...aws, logger }),
        consumer: (inbox) => new SqsConsumer({ queueUrl: url, deadLetterQueueUrl: dead, ...aws, destination: 'items', waitTimeSeconds: 1, stopTimeoutMs: 5000, inbox }),
        cleanup: async () => {
          await deleteQueues(client, [url, dead]);
          client.destroy();
        },
      };
    },
  },
];

describe('broker down at start', { timeout: 600_000 }, () => {
  let db: TestDb;
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  });
  after(async () => {
    const release = await holdBrokerLock('rabbitmq');
    try {
      await rabbit.cleanup();
    } finally {
      release();
    }
    // The Kafka case's topic and group, and the admin client that made them (left open, it kept the file's process alive).
    const releaseKafka = await holdBrokerLock('kafka');
    try {
      await closeKafkaAdmin();
    } finally {
      releaseKafka();
    }
    await db.close();
  });

  for (const c of CASES) {
    it(`${c.name}: a relay and a consumer started while the broker refuses connections start anyway, and every event is applied once it answers`, { timeout: 120_000 }, async (t) => {
      const skip = (await c.skip?.()) ?? false;
      if (skip) return t.skip(skip);
      // Other files stop or kill the shared Kafka and RabbitMQ brokers: take turns with them.
      const release = SHARED_BROKERS.has(c.name) ? await holdBrokerLock(c.name) : () => {};
      const proxy: TcpProxy = await startTcpProxy(c.port);
      await proxy.close(); // the port now refuses connections
      const logger = recordingLogger();
      const s = await c.setup(proxy.port, logger).catch((err: unknown) => {
        release();
        throw err;
      });
      const Item = defineEvent({ type: `Outage.${c.name}`, aggregateType: 'Item', destination: s.destination, payload: payloadType<{ n: number }>() });
      const relay = createRelay({
        store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
        transport: s.transport,
        pollIntervalMs: 50,
        circuitBreaker: { baseDelayMs: 200, maxDelayMs: 1000 },
      });
      const applied: string[] = [];
      const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: `outage-${c.name}` });
      inbox.on(Item.type, async (event) => void applied.push(event.id));
      const consumer = s.consumer(inbox);
      let startError: unknown;
      let consumerStarted = false;
      try {
        // Before: start() threw ConfigError naming the address (the CLI exited 2 and was restarted in a loop).
        await relay.start();
        const warning = logger.lines.find((l) => l.level === 'warn' && l.obj.transport === c.name);
        assert.ok(warning, `a warning naming the ${c.name} transport: ${JSON.stringify(logger.lines)}`);
        assert.match(warning.msg, /does not answer at start; starting anyway, its events wait/);

        const started = consumer.start().then(
          () => void (consumerStarted = true),
          (err: unknown) => void (startError = err),
        );
        const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Item] });
        const ids: string[] = [];
        await db.transaction(async (tx) => {
          for (let n = 0; n < EVENTS; n++) ids.push(...(await outbox.enqueue(tx, Item({ aggregateId: `${c.name}-${n % 3}`, payload: { n } }))));
        });
        await sleep(2500);
        // Before: the consumer's start() rejected with the connection error.
        assert.equal(startError, undefined, `the consumer keeps trying: ${String(startError)}`);
        assert.equal(consumerStarted, false);
        const health = await consumer.health();
        assert.deepEqual([health.live, health.ready], [true, false], JSON.stringify(health));
        // Each failed attempt shows (kafkajs's own connect retries make the first one take a few seconds).
        await waitFor('a failed start attempt in health()', async () => (await consumer.health()).checks.some((k) => k.name === 'last-error' && /^start failed/.test(k.detail ?? '')), 30_000, 200);
        const states = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [ids]);
        assert.ok(states.every((r) => r.state === 'pending'), `events wait, none parked: ${JSON.stringify(states)}`);

        await proxy.open();
        await waitFor(`${EVENTS} events applied`, () => {
          if (startError !== undefined) throw new Error(`the consumer's start() failed once the broker answered: ${String(startError)}`);
          return ids.every((id) => applied.includes(id));
        }, 90_000, 100);
        await started;
        assert.equal(startError, undefined);
        assert.equal(new Set(applied).size, applied.length, 'each applied once');
      } finally {
        await consumer.stop().catch(() => {});
        await relay.stop().catch(() => {});
        await proxy.close().catch(() => {});
        await s.cleanup().catch(() => {});
        release();
      }
    });
  }

  it('stop() ends a consumer waiting for its broker: start() rejects with AbortedError, nothing is left running', async () => {
    const proxy = await startTcpProxy(6379);
    await proxy.close();
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'outage-stop' });
    const consumer = new RedisConsumer({ url: `redis://127.0.0.1:${proxy.port}`, streams: { items: `txbox-test:outage-stop-${run}` }, group: 'g', blockMs: 200, inbox });
    const errors: string[] = [];
    consumer.events.on('error', (e) => void errors.push(e.operation));
    const started = consumer.start();
    await waitFor('a failed start attempt', () => errors.includes('start'), 10_000);
    const stoppedAt = Date.now();
    await consumer.stop();
    await assert.rejects(started, (err: Error & { code?: string }) => err.code === 'TXBOX_ABORTED' && /stopped before the broker answered/.test(err.message));
    assert.ok(Date.now() - stoppedAt < 5000, 'stop() did not wait for the broker');
    assert.equal((await consumer.health()).live, false);
  });

  it('a configuration error still rejects start() at once: a consumer with a password Redis does not want, a relay transport with the same', async () => {
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'outage-config' });
    const consumer = new RedisConsumer({ url: 'redis://:not-needed@127.0.0.1:6379', streams: { items: `txbox-test:outage-config-${run}` }, group: 'g', blockMs: 200, inbox });
    const t0 = Date.now();
    await assert.rejects(consumer.start(), (err: Error & { code?: string; field?: string }) => err.code === 'TXBOX_CONFIG' && err.field === 'url' && /remove the password/.test(err.message));
    assert.ok(Date.now() - t0 < 5000);
    const transport = new RedisTransport({ url: 'redis://:not-needed@127.0.0.1:6379', streams: { items: 'x' } });
    await assert.rejects(transport.start(), (err: Error & { field?: string }) => err.field === 'url' && /remove the password/.test(err.message));
    await transport.close();
  });
});
