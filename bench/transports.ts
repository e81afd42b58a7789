/**
 * Every broker transport through the relay: drain a backlog from PostgreSQL
 * to the real broker, and in the same run the raw publish rate of the same
 * transport with no database, then a steady rate for a while measuring
 * commit-to-broker-ack latency (commit time taken by the producer just after
 * COMMIT, ack time when the transport's publish resolved for the event; one
 * process, one clock). Commit time is taken just before COMMIT is sent, so
 * the latency is an upper bound that includes the commit round trip.
 *
 *   node --conditions=txbox-source --import tsx bench/transports.ts
 *
 * Settings: BENCH_TRANSPORTS (kafka,nats,redis,rabbitmq), BENCH_EVENTS (200000),
 * BENCH_KEYS (1000), BENCH_RATE (1000), BENCH_SECONDS (30), BENCH_BATCH (500), BENCH_LANES (2).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createRelay, type OutboxEvent, type PublishOutcome, type Transport } from 'txbox';
import { PostgresRelayStore } from 'txbox/postgres';
import pg from 'pg';
import { brokerTransport, KAFKA_BROKERS, NATS_SERVERS, RABBITMQ_URL, REDIS_URL, type BrokerSpec } from './broker-transports.ts';
import { startRelayWorker } from './relay-process.ts';
import { Backlog, DATABASE_URL, benchOutbox, recordAcks, envInt, envList, fmtInt, log, orderEvent, percentile, perSec, printTable, resetOutbox, summary, withBench, type Bench } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const RATE = envInt('BENCH_RATE', 1000);
const SECONDS = envInt('BENCH_SECONDS', 30);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const WHICH = (process.env.BENCH_TRANSPORTS ?? 'kafka,nats,redis,rabbitmq').split(',').filter(Boolean);
const RELAYS = envList('BENCH_RELAYS', [1, 2]);
const run = randomBytes(3).toString('hex');

interface Broker {
  readonly name: string;
  /** Creates the broker side of destination `orders` and returns the transport's spec and a cleanup. */
  setup(): Promise<{ spec: BrokerSpec; cleanup(): Promise<void> }>;
}

const brokers: Record<string, Broker> = {
  kafka: {
    name: 'kafka',
    async setup() {
      execFileSync('bash', ['scripts/kafka/up.sh'], { stdio: 'ignore' });
      const { Kafka, logLevel } = await import('kafkajs');
      const topic = `bench-orders-${run}`;
      const admin = new Kafka({ brokers: KAFKA_BROKERS, logLevel: logLevel.NOTHING }).admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic, numPartitions: 6, replicationFactor: 1 }], waitForLeaders: true });
      return {
        spec: { kind: 'kafka', topic },
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
      const stream = `BENCH_${run}`;
      const subject = `bench.${run}.orders`;
      const nc = await connect({ servers: NATS_SERVERS });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: stream, subjects: [subject] });
      return {
        spec: { kind: 'nats', subject, stream },
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
      const prefix = `bench:${run}:`;
      return {
        spec: { kind: 'redis', prefix },
        cleanup: async () => {
          const r = new Redis(REDIS_URL);
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
      const queue = `bench.orders.${run}`;
      const conn = await amqp.connect(RABBITMQ_URL);
      const ch = await conn.createChannel();
      await ch.assertQueue(queue, { durable: true });
      return {
        spec: { kind: 'rabbitmq', queue },
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

/**
 * `relays` relay processes (bench/relay-worker.ts) drain the backlog. They
 * start on the restored backlog but claim nothing until they have split the
 * buckets evenly between them; the clock runs from their go until they
 * together have published every event.
 */
async function drain(bench: Bench, backlog: Backlog, spec: BrokerSpec, relays: number): Promise<{ perSec: number; rssMaxMb: number }> {
  await backlog.restore();
  const buckets = (await bench.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${bench.names.buckets}`))[0]!.n;
  const held = new Array<number>(relays).fill(0);
  const published = new Array<number>(relays).fill(0);
  let progressed: () => void = () => {};
  const workers = Array.from({ length: relays }, (_, i) =>
    startRelayWorker(
      { schema: bench.schema, batchSize: BATCH, lanes: LANES, deleteOnPublish: false, pollIntervalMs: 50, leaseTtlMs: 3000, progress: true, gated: true, transport: { kind: 'broker', spec } },
      (m) => {
        if (m.type === 'leases') held[i] = m.held;
        else published[i] = m.published;
        progressed();
      },
    ),
  );
  const until = async (done: () => boolean, what: string, limitMs: number): Promise<void> => {
    const deadline = performance.now() + limitMs;
    while (!done()) {
      if (performance.now() > deadline) throw new Error(`drain: ${what} not reached within ${limitMs} ms (held ${held.join('/')}, published ${published.join('/')})`);
      await new Promise<void>((resolve) => {
        progressed = resolve;
        setTimeout(resolve, 50);
      });
    }
  };
  await Promise.all(workers.map((w) => w.started));
  await until(() => held.every((h) => h >= Math.floor(buckets / relays)), 'an even split of the buckets', 20_000);
  const started = performance.now();
  for (const w of workers) w.go();
  await until(() => published.reduce((a, b) => a + b, 0) >= backlog.events, 'every event published', 600_000);
  const ms = performance.now() - started;
  const results = await Promise.all(workers.map((w) => w.stop()));
  for (const r of results) if (r.errors.length > 0) log(`  relay errors: ${r.errors.join('; ')}`);
  return { perSec: perSec(backlog.events, ms), rssMaxMb: Math.max(...results.map((r) => r.rssMax)) / 2 ** 20 };
}

async function steady(bench: Bench, transport: Transport): Promise<{ p50: number; p99: number; max: number; n: number }> {
  await resetOutbox(bench);
  const outbox = benchOutbox(bench, true);
  const acked = new Map<string, number>();
  const committed = new Map<string, number>();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection }), transport: recordAcks(transport, acked), batchSize: BATCH, lanes: LANES, retention: false });
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
    const { spec, cleanup } = await broker.setup();
    try {
      const raw = await rawRate(await brokerTransport(spec), EVENTS);
      log(`${name}: raw publish ${fmtInt(raw)} events/s`);
      const drains: string[] = [];
      for (const relays of RELAYS) {
        const d = await drain(bench, backlog, spec, relays);
        log(`${name}: ${relays} relay process${relays === 1 ? '' : 'es'}: drain ${fmtInt(d.perSec)} events/s (${((d.perSec / raw) * 100).toFixed(0)}% of raw), relay max RSS ${d.rssMaxMb.toFixed(0)} MB`);
        drains.push(fmtInt(d.perSec), `${((d.perSec / raw) * 100).toFixed(0)}%`);
      }
      const lat = await steady(bench, await brokerTransport(spec));
      log(`${name}: steady ${RATE}/s for ${SECONDS} s: p50 ${lat.p50.toFixed(1)} ms, p99 ${lat.p99.toFixed(1)} ms, max ${lat.max.toFixed(1)} ms`);
      rows.push([name, fmtInt(raw), ...drains, lat.p50.toFixed(1), lat.p99.toFixed(1), lat.max.toFixed(1)]);
    } finally {
      await cleanup();
    }
  }
  const drainColumns = RELAYS.flatMap((n) => [`drain/s, ${n} relay${n === 1 ? '' : 's'}`, 'of raw']);
  printTable(['transport', 'raw publish/s', ...drainColumns, 'p50 ms', 'p99 ms', 'max ms'], rows);
  for (const r of rows) {
    const drains = RELAYS.map((n, i) => `${n} relay${n === 1 ? '' : 's'} ${r[2 + 2 * i]} events/s (${r[3 + 2 * i]} of raw ${r[1]}/s)`).join(', ');
    const [p50, p99, max] = r.slice(-3);
    summary(`transport-${r[0]}`, `drain ${drains}; ${RATE}/s commit-to-ack p50 ${p50} ms, p99 ${p99} ms, max ${max} ms`);
  }
});
