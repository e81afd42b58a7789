/**
 * The RabbitMQ transport through the transport conformance suite, against the
 * real broker on 127.0.0.1:5672. Each destination is a fresh durable direct
 * exchange with a durable queue bound under the destination name; the
 * restart is `rabbitmqctl stop_app` / `start_app`. RabbitMQ has no
 * broker-side dedup, so a re-published id is stored twice.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { RabbitMqTransport, decodeRabbitMqMessage } from 'txbox/rabbitmq';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { lockBroker } from '../fixtures/rabbitmq-consumer-broker.ts';

const AMQP_URL = process.env.TXBOX_TEST_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const run = promisify(execFile);

/**
 * Test files that use the shared broker take turns: a stop_app or a
 * resource alarm in one would break another running beside it. A lock
 * left by a dead process is taken over.
 */


const unlock = await lockBroker();
const prefix = `txbox_conf_${randomBytes(3).toString('hex')}`;
let counter = 0;
const exchanges: string[] = [];
const queues: string[] = [];
const arrivals = new Map<string, Delivered[]>();
let admin: ChannelModel | null = null;
let channel: Channel | null = null;
const consuming = new Set<string>();

/** The test's own connection (declares, consumes, deletes); reopened after a broker restart. */
async function adminChannel(): Promise<Channel> {
  if (channel) return channel;
  const model = await connect(AMQP_URL);
  model.on('error', () => {});
  model.on('close', () => {
    admin = null;
    channel = null;
    consuming.clear();
  });
  const ch = await model.createChannel();
  ch.on('error', () => {});
  ch.on('close', () => {
    if (channel === ch) channel = null;
    consuming.clear();
  });
  await ch.prefetch(2000);
  admin = model;
  channel = ch;
  return ch;
}

async function ensureConsumer(queue: string): Promise<void> {
  if (consuming.has(queue)) return;
  const ch = await adminChannel();
  consuming.add(queue);
  try {
    await ch.consume(queue, (msg) => {
      if (msg === null) return;
      const decoded = decodeRabbitMqMessage(msg);
      const list = arrivals.get(queue) ?? [];
      list.push(decoded.ok ? { id: decoded.event.id, key: decoded.event.key } : { id: `undecodable:${decoded.message}`, key: '' });
      arrivals.set(queue, list);
      ch.ack(msg);
    });
  } catch (err) {
    consuming.delete(queue);
    throw err;
  }
}

async function brokerAcceptsConnections(timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const probe = await connect(AMQP_URL);
      await probe.close();
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(200);
    }
  }
}

runTransportConformance({
  name: 'rabbitmq',
  databaseUrl: DATABASE_URL,
  events: 10_000,
  broker: {
    dedup: 'none',
    oversizeBytes: 200 * 1024,
    async createDestination() {
      const name = `${prefix}_${++counter}`;
      const ch = await adminChannel();
      await ch.assertExchange(name, 'direct', { durable: true });
      exchanges.push(name);
      await ch.assertQueue(name, { durable: true });
      queues.push(name);
      await ch.bindQueue(name, name, name);
      return name;
    },
    createTransport(destinations) {
      return new RabbitMqTransport({
        url: AMQP_URL,
        destinations: Object.fromEntries(destinations.map((d) => [d, { exchange: d }])),
        maxMessageBytes: 128 * 1024,
        reconnectMaxDelayMs: 2000,
      });
    },
    async readBack(destination, expected, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      let seen = -1;
      let quietSince = Date.now();
      for (;;) {
        await ensureConsumer(destination).catch(() => {}); // the broker may be restarting
        const got = arrivals.get(destination) ?? [];
        if (got.length !== seen) [seen, quietSince] = [got.length, Date.now()];
        if (new Set(got.map((d) => d.id)).size >= expected || Date.now() >= deadline) break;
        // Duplicates make the total reach `expected` before every id did: stop only once nothing more comes.
        if (got.length >= expected && Date.now() - quietSince > 3000) break;
        await sleep(25);
      }
      return [...(arrivals.get(destination) ?? [])];
    },
    async restart() {
      await run('rabbitmqctl', ['stop_app']);
      await sleep(500); // the relay meets a closed port meanwhile
      await run('rabbitmqctl', ['start_app']);
      await brokerAcceptsConnections(60_000);
    },
    async unroutableDestination() {
      const name = `${prefix}_unbound_${++counter}`;
      const ch = await adminChannel();
      await ch.assertExchange(name, 'direct', { durable: false });
      exchanges.push(name);
      return name;
    },
    misconfigured(destinations) {
      const options = { destinations: Object.fromEntries(destinations.map((d) => [d, { exchange: d }])), connectTimeoutMs: 5000 };
      return [
        { transport: new RabbitMqTransport({ ...options, url: 'amqp://guest:guest@127.0.0.1:1' }), setting: /url: cannot connect to RabbitMQ at amqp:\/\/127\.0\.0\.1:1\// },
        { transport: new RabbitMqTransport({ ...options, url: 'amqp://guest:wrong@127.0.0.1:5672' }), setting: /^url: .*refused the login of user "guest"/ },
      ];
    },
    async close() {
      try {
        const ch = await adminChannel();
        for (const q of queues) await ch.deleteQueue(q);
        for (const x of exchanges) await ch.deleteExchange(x);
        await admin?.close();
      } finally {
        await unlock();
      }
    },
  },
});
