/**
 * KafkaConsumer throughput: a 6-partition topic pre-loaded with
 * BENCH_KC_EVENTS (20,000) events over BENCH_KC_KEYS (200) keys, published
 * with KafkaTransport; one consumer process drains it through the inbox
 * (PostgreSQL) with one projection upsert per event (`applyVersioned`), once
 * per `keyConcurrency` setting (a fresh group each time). Prints events/s
 * (from the group join to the last record settled) and the p50/p99
 * handler-commit latency (from handing an event to the inbox until its
 * transaction committed). Reference rows from the same run: the same inbox
 * work without Kafka (a KeyedDispatcher over `inbox.process` with as many
 * handlers at once), and the consumer with an in-memory inbox store (no
 * database: the consumer's own ceiling).
 *
 *   node --conditions=txbox-source --import tsx bench/kafka-consumer.ts   # runs scripts/kafka/up.sh first
 *
 * Settings (environment): BENCH_KC_EVENTS (20000), BENCH_KC_KEYS (200),
 * BENCH_KC_KEY_CONCURRENCY (comma list, 1,4,16), BENCH_KC_POOL (pg pool size, 16),
 * BENCH_KAFKA_BROKERS (127.0.0.1:9092).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { createInbox, KeyedDispatcher, uuidv7, type Inbox, type InboxStore, type OutboxEvent } from 'txbox';
import { KafkaConsumer, KafkaTransport } from 'txbox/kafka';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { envInt, envList, fmtInt, log, memoryInboxStore, orderPayload, percentile, perSec, printTable, summary, withBench, type Bench } from './lib.ts';

const EVENTS = envInt('BENCH_KC_EVENTS', 20_000);
const KEYS = envInt('BENCH_KC_KEYS', 200);
const KEY_CONCURRENCY = envList('BENCH_KC_KEY_CONCURRENCY', [1, 4, 16]);
const POOL = envInt('BENCH_KC_POOL', 16);
const BROKERS = (process.env.BENCH_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const PARTITIONS = 6;
const run = randomBytes(3).toString('hex');
const TOPIC = `txbox-bench-kc-${run}`;
const groups: string[] = [];

interface Result {
  readonly mode: string;
  readonly concurrency: string;
  readonly perSec: number;
  readonly p50: number;
  readonly p99: number;
}

/** `EVENTS` events, round-robin over `KEYS` keys, version 1.. per key, as a relay would publish them. */
function buildEvents(): OutboxEvent[] {
  const occurredAt = new Date();
  return Array.from({ length: EVENTS }, (_, i) => {
    const k = i % KEYS;
    return {
      id: uuidv7(),
      type: 'OrderPlaced',
      aggregateType: 'Customer',
      aggregateId: `c${k}`,
      key: `Customer:c${k}`,
      destination: 'orders',
      payload: orderPayload(i, k),
      headers: {},
      occurredAt,
      version: Math.floor(i / KEYS) + 1,
    };
  });
}

function benchInbox(bench: Bench, consumer: string, store?: InboxStore): Inbox {
  const inbox = createInbox({ store: store ?? new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), consumer });
  // Without a database there is no projection to upsert: the handler does nothing.
  if (store) return inbox.on('OrderPlaced', () => {});
  inbox.on('OrderPlaced', async (event, tx) => {
    const p = event.payload as ReturnType<typeof orderPayload>;
    await applyVersioned(tx, {
      table: `${bench.schema}.customer_view`,
      id: { consumer, customer_id: event.aggregateId },
      version: event.version!,
      values: { last_order: p.orderId, total: p.total },
    });
  });
  return inbox;
}

async function viaConsumer(bench: Bench, keyConcurrency: number, memory = false): Promise<Result> {
  const latencies: number[] = [];
  const groupId = `txbox-bench-kc-${run}-${memory ? 'mem' : 'pg'}-${keyConcurrency}`;
  groups.push(groupId);
  const inbox = benchInbox(bench, groupId.replaceAll('-', '_'), memory ? memoryInboxStore() : undefined);
  const consumer = new KafkaConsumer({ brokers: BROKERS, groupId, topics: [TOPIC], fromBeginning: true, deadLetterTopic: null, inbox, keyConcurrency, partitionConcurrency: PARTITIONS });
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  let last = 0;
  consumer.events.on('settled', (s) => {
    latencies.push(s.durationMs);
    if (consumer.stats.processed + consumer.stats.duplicate >= EVENTS) {
      last = performance.now();
      done();
    }
  });
  await consumer.start();
  const started = performance.now();
  await finished;
  await consumer.stop();
  latencies.sort((a, b) => a - b);
  if (consumer.stats.processed !== EVENTS) log(`  WARNING: processed ${consumer.stats.processed}, expected ${EVENTS}`);
  const mode = memory ? 'KafkaConsumer, in-memory inbox store' : 'KafkaConsumer + PostgreSQL inbox';
  return { mode, concurrency: `${PARTITIONS} x ${keyConcurrency}`, perSec: perSec(EVENTS, last - started), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

async function inboxOnly(bench: Bench, events: readonly OutboxEvent[], concurrency: number): Promise<Result> {
  const latencies: number[] = [];
  const inbox = benchInbox(bench, `direct_${concurrency}`);
  inbox.events.on('processed', (e) => latencies.push(e.durationMs));
  const dispatcher = new KeyedDispatcher(concurrency);
  const started = performance.now();
  for (const e of events) void dispatcher.push(e.key, async () => void (await inbox.process(e)));
  await dispatcher.onIdle();
  const ms = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { mode: 'inbox only, no Kafka', concurrency: String(concurrency), perSec: perSec(events.length, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

execFileSync('bash', [new URL('../scripts/kafka/up.sh', import.meta.url).pathname], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 240_000 });

await withBench(
  'kafkaconsumer',
  async (bench) => {
    await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
    await bench.sql(`CREATE TABLE "${bench.schema}".customer_view (consumer text, customer_id text, last_order text, total int, version int NOT NULL, PRIMARY KEY (consumer, customer_id))`);
    const admin = new Kafka({ brokers: BROKERS, clientId: 'txbox-bench-admin', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    try {
      const events = buildEvents();
      const transport = new KafkaTransport({ brokers: BROKERS, topics: { orders: TOPIC } });
      await transport.start();
      const loading = performance.now();
      // One event per key per call, as the relay sends them.
      for (let i = 0; i < events.length; i += KEYS) {
        const outcomes = await transport.publish(events.slice(i, i + KEYS), AbortSignal.timeout(60_000));
        if (outcomes.some((o) => !o.ok)) throw new Error('pre-loading the topic failed');
      }
      await transport.close();
      log(`topic ${TOPIC} (${PARTITIONS} partitions) pre-loaded with ${fmtInt(EVENTS)} events over ${KEYS} keys in ${fmtInt(performance.now() - loading)} ms; pg pool ${POOL}`);
      const results: Result[] = [];
      for (const k of KEY_CONCURRENCY) {
        results.push(await viaConsumer(bench, k));
        log(`KafkaConsumer, keyConcurrency ${k}: ${fmtInt(results.at(-1)!.perSec)} events/s`);
        results.push(await inboxOnly(bench, events, PARTITIONS * k));
        log(`inbox only, ${PARTITIONS * k} at once: ${fmtInt(results.at(-1)!.perSec)} events/s`);
      }
      results.push(await viaConsumer(bench, KEY_CONCURRENCY.at(-1)!, true));
      log(`KafkaConsumer, in-memory inbox store: ${fmtInt(results.at(-1)!.perSec)} events/s`);
      console.log(`\n${fmtInt(EVENTS)} events over ${KEYS} keys in ${PARTITIONS} partitions, inbox + one applyVersioned upsert per event, one process:`);
      printTable(
        ['mode', 'handlers at once', 'events/s', 'p50 ms', 'p99 ms'],
        results.map((r) => [r.mode, r.concurrency, fmtInt(r.perSec), r.p50.toFixed(1), r.p99.toFixed(1)]),
      );
      const best = results.filter((r) => r.mode === 'KafkaConsumer + PostgreSQL inbox').sort((a, b) => b.perSec - a.perSec)[0]!;
      summary('kafka-consumer', `${fmtInt(best.perSec)} events/s (${best.concurrency} handlers at once), handler-commit p50 ${best.p50.toFixed(1)} ms, p99 ${best.p99.toFixed(1)} ms`);
    } finally {
      await admin.deleteTopics({ topics: [TOPIC], timeout: 30_000 }).catch(() => {});
      await admin.deleteGroups(groups).catch(() => {});
      await admin.disconnect();
    }
  },
  POOL,
);
