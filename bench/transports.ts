/**
 * Every broker transport through the relay: drain a backlog from PostgreSQL
 * to the real broker, and in the same run the raw publish rate of the same
 * transport with no database, then a steady rate for a while measuring
 * commit-to-broker-ack latency (commit time taken by the producer just after
 * COMMIT, ack time when the transport's publish resolved for the event; one
 * process, one clock). Commit time is taken just before COMMIT is sent, so
 * the latency is an upper bound that includes the commit round trip.
 *
 *   node --conditions=development --import tsx bench/transports.ts
 *
 * Settings: BENCH_TRANSPORTS (kafka,nats,redis,rabbitmq), BENCH_EVENTS (200000),
 * BENCH_KEYS (1000), BENCH_RATE (1000), BENCH_SECONDS (30), BENCH_BATCH (500), BENCH_LANES (2).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createRelay, type OutboxEvent, type PublishOutcome, type Transport } from 'txbox';
import { PostgresRelayStore } from 'txbox/postgres';
import pg from 'pg';
import { Backlog, DATABASE_URL, benchOutbox, envInt, fmtInt, log, orderEvent, percentile, perSec, printTable, resetOutbox, summary, withBench, type Bench } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const RATE = envInt('BENCH_RATE', 1000);
const SECONDS = envInt('BENCH_SECONDS', 30);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const WHICH = (process.env.BENCH_TRANSPORTS ?? 'kafka,nats,redis,rabbitmq').split(',').filter(Boolean);
const run = randomBytes(3).toString('hex');

interface Broker {
  readonly name: string;
  /** Creates the broker side of destination `orders` and returns a transport factory and a cleanup. */
  setup(): Promise<{ transport(): Transport; cleanup(): Promise<void> }>;
}

const brokers: Record<string, Broker> = {
  kafka: {
    name: 'kafka',
    async setup() {
      execFileSync('bash', ['scripts/kafka/up.sh'], { stdio: 'ignore' });
      const { Kafka, logLevel } = await import('kafkajs');
      const { KafkaTransport } = await import('txbox/kafka');
      const topic = `bench-orders-${run}`;
      const admin = new Kafka({ brokers: ['127.0.0.1:9092'], logLevel: logLevel.NOTHING }).admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic, numPartitions: 6, replicationFactor: 1 }], waitForLeaders: true });
      return {
        transport: () => new KafkaTransport({ brokers: ['127.0.0.1:9092'], topics: { orders: topic } }),
        cleanup: async () => {
          await admin.deleteTopics({ topics: [topic] }).catch(() => {});
          await admin.disconnect();
        },
      };
    },
  },
  nats: {
    name: 'nats',
    async setup() {
      const { connect } = await import('@nats-io/transport-node');
      const { jetstreamManager } = await import('@nats-io/jetstream');
      const { NatsTransport } = await import('txbox/nats');
      const stream = `BENCH_${run}`;
      const subject = `bench.${run}.orders`;
      const nc = await connect({ servers: '127.0.0.1:4222' });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: stream, subjects: [subject] });
      return {
        transport: () => new NatsTransport({ servers: '127.0.0.1:4222', subjects: { orders: subject }, streams: { orders: stream } }),
        cleanup: async () => {
          await jsm.streams.delete(stream).catch(() => {});
          await nc.close();
        },
      };
    },
  },
  redis: {
    name: 'redis',
    async setup() {
      const { Redis } = await import('ioredis');
      const { RedisTransport } = await import('txbox/redis');
      const prefix = `bench:${run}:`;
      return {
        transport: () => new RedisTransport({ url: 'redis://127.0.0.1:6379', streamPrefix: prefix }),
        cleanup: async () => {
          const r = new Redis('redis://127.0.0.1:6379');
          await r.del(`${prefix}orders`);
          r.disconnect();
        },
      };
    },
  },
  rabbitmq: {
    name: 'rabbitmq',
    async setup() {
      const amqp = await import('amqplib');
      const { RabbitMqTransport } = await import('txbox/rabbitmq');
      const url = 'amqp://guest:guest@127.0.0.1:5672';
      const queue = `bench.orders.${run}`;
      const conn = await amqp.connect(url);
      const ch = await conn.createChannel();
      await ch.assertQueue(queue, { durable: true });
      return {
        // The default exchange routes by queue name.
        transport: () => new RabbitMqTransport({ url, destinations: { orders: { exchange: '', routingKey: queue } } }),
        cleanup: async () => {
          await ch.deleteQueue(queue).catch(() => {});
          await conn.close();
        },
      };
    },
  },
};

/** Raw publish of `n` events through the transport in calls of BATCH distinct keys, no database. */
async function rawRate(transport: Transport, n: number): Promise<number> {
  await transport.start?.(AbortSignal.timeout(30_000));
  const started = performance.now();
  let sent = 0;
  for (let from = 0; from < n; from += BATCH) {
    const events: OutboxEvent[] = [];
    for (let i = from; i < Math.min(n, from + BATCH); i++) {
      const e = orderEvent(i, i - from); // distinct keys within a call, as the relay sends
      events.push({ id: `00000000-0000-7000-8000-${String(i).padStart(12, '0')}`, type: e.type, aggregateType: e.aggregateType, aggregateId: String(e.aggregateId), key: `Order:c${i - from}`, destination: 'orders', payload: e.payload, headers: e.headers ?? {}, occurredAt: new Date(), version: null });
    }
    const outcomes = await transport.publish(events, AbortSignal.timeout(60_000));
    sent += outcomes.filter((o) => o.ok).length;
  }
  const ms = performance.now() - started;
  await transport.close();
  if (sent < n) log(`raw: ${n - sent} of ${n} publishes failed`);
  return perSec(sent, ms);
}

/** Wraps a transport to record when each event was acked. */
function timed(inner: Transport, acked: Map<string, number>): Transport {
  return {
    name: inner.name,
    start: (s) => inner.start?.(s) ?? Promise.resolve(),
    close: () => inner.close(),
    async publish(events, signal): Promise<PublishOutcome[]> {
      const outcomes = await inner.publish(events, signal);
      const now = performance.now();
      outcomes.forEach((o, i) => o.ok && acked.set(events[i]!.id, now));
      return outcomes;
    },
  };
}

async function drain(bench: Bench, backlog: Backlog, transport: Transport): Promise<number> {
  await backlog.restore();
  const acked = new Map<string, number>();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection }), transport: timed(transport, acked), batchSize: BATCH, lanes: LANES, retention: false, pollIntervalMs: 50 });
  const started = performance.now();
  await relay.start();
  while (acked.size < backlog.events) await new Promise((r) => setTimeout(r, 20));
  const ms = performance.now() - started;
  await relay.stop();
  return perSec(backlog.events, ms);
}

async function steady(bench: Bench, transport: Transport): Promise<{ p50: number; p99: number; max: number; n: number }> {
  await resetOutbox(bench);
  const outbox = benchOutbox(bench, true);
  const acked = new Map<string, number>();
  const committed = new Map<string, number>();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection }), transport: timed(transport, acked), batchSize: BATCH, lanes: LANES, retention: false });
  await relay.start();
  const total = RATE * SECONDS;
  const started = performance.now();
  let i = 0;
  const clients = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const n = i++;
        if (n >= total) return;
        const due = started + (n * 1000) / RATE;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        await c.query('BEGIN');
        const [id] = await outbox.enqueue(c, orderEvent(n, n % KEYS));
        // Taken just before COMMIT is sent: the event cannot be visible earlier, so the
        // figure is an upper bound that includes the commit's own round trip.
        committed.set(id!, performance.now());
        await c.query('COMMIT');
      }
    }),
  );
  await Promise.all(clients.map((c) => c.end()));
  while (acked.size < total) await new Promise((r) => setTimeout(r, 20));
  await relay.stop();
  const lat = [...committed].map(([id, t]) => Math.max(0, acked.get(id)! - t)).sort((a, b) => a - b);
  return { p50: percentile(lat, 0.5), p99: percentile(lat, 0.99), max: lat.at(-1) ?? 0, n: lat.length };
}

await withBench('transports', async (bench) => {
  const backlog = await Backlog.create(bench, EVENTS, KEYS);
  const rows: string[][] = [];
  for (const name of WHICH) {
    const broker = brokers[name];
    if (!broker) throw new Error(`unknown transport ${name}`);
    const { transport, cleanup } = await broker.setup();
    try {
      const raw = await rawRate(transport(), EVENTS);
      log(`${name}: raw publish ${fmtInt(raw)} events/s`);
      const relayRate = await drain(bench, backlog, transport());
      log(`${name}: relay drain ${fmtInt(relayRate)} events/s`);
      const lat = await steady(bench, transport());
      log(`${name}: steady ${RATE}/s for ${SECONDS} s: p50 ${lat.p50.toFixed(1)} ms, p99 ${lat.p99.toFixed(1)} ms, max ${lat.max.toFixed(1)} ms`);
      rows.push([name, fmtInt(raw), fmtInt(relayRate), `${((relayRate / raw) * 100).toFixed(0)}%`, lat.p50.toFixed(1), lat.p99.toFixed(1), lat.max.toFixed(1)]);
    } finally {
      await cleanup();
    }
  }
  printTable(['transport', 'raw publish/s', 'relay drain/s', 'drain/raw', 'p50 ms', 'p99 ms', 'max ms'], rows);
  for (const r of rows) summary(`transport-${r[0]}`, `relay drain ${r[2]} events/s (raw ${r[1]}/s, ${r[3]}); ${RATE}/s commit-to-ack p50 ${r[4]} ms, p99 ${r[5]} ms, max ${r[6]} ms`);
});
