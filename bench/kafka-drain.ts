/**
 * Kafka publish benchmark, no database: how fast the Kafka transport's own
 * client and configuration (kafkajs, idempotent producer, acks=all, the
 * Java-compatible partitioner) get ~300-byte events acked, and what
 * KafkaTransport adds on top (message building, size check, topic check,
 * outcome per event). This is the ceiling a relay publishing to Kafka can
 * reach from one process; compare it with bench/drain.ts's SQL limits.
 *
 *   node --conditions=txbox-source --import tsx bench/kafka-drain.ts
 *
 * Starts (or reuses) the local broker with scripts/kafka/up.sh. Modes, each
 * on a fresh topic of 6 partitions (deleted afterwards):
 * - raw send: the transport's producer (kafka-client.ts) sending batches of
 *   BATCH records, one batch at a time, or two at a time on two producers
 *   (the relay's two lanes);
 * - KafkaTransport.publish: calls of BATCH events, one at a time or two at a time.
 * After each mode the topic's records are counted (sum of the partitions'
 * high watermarks), which catches loss and duplicates.
 *
 * Settings (environment): BENCH_KAFKA_MESSAGES (200000), BENCH_KAFKA_BATCH (500),
 * BENCH_KAFKA_KEYS (100), BENCH_KAFKA_ROUNDS (1), BENCH_KAFKA_BROKER (127.0.0.1:9092).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { uuidv7, type OutboxEvent } from 'txbox';
import { KafkaTransport, resolveKafkaTransportOptions } from 'txbox/kafka';
import { createKafkaClient, type KafkaRecord } from '../src/transports/kafka/kafka-client.ts';
import { buildKafkaRecord } from '../src/transports/kafka/kafka-message.ts';
import { envInt, fmtInt, log, orderPayload, percentile, perSec, printTable, summary } from './lib.ts';

const MESSAGES = envInt('BENCH_KAFKA_MESSAGES', 200_000);
const BATCH = envInt('BENCH_KAFKA_BATCH', 500);
const KEYS = envInt('BENCH_KAFKA_KEYS', 100);
const ROUNDS = envInt('BENCH_KAFKA_ROUNDS', 1);
const BROKER = process.env.BENCH_KAFKA_BROKER ?? '127.0.0.1:9092';
const run = randomBytes(3).toString('hex');

if (BROKER === '127.0.0.1:9092') execFileSync('bash', [new URL('../scripts/kafka/up.sh', import.meta.url).pathname], { stdio: 'inherit' });

const admin = new Kafka({ brokers: [BROKER], clientId: 'txbox-bench-admin', logLevel: logLevel.NOTHING }).admin();
await admin.connect();
const topics: string[] = [];
const occurredAt = new Date();

function event(i: number, destination: string): OutboxEvent {
  const customer = i % KEYS;
  return {
    id: uuidv7(),
    type: 'OrderPlaced',
    aggregateType: 'Order',
    aggregateId: `c${customer}`,
    key: `Order:c${customer}`,
    destination,
    payload: orderPayload(i, customer),
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt,
    version: 1,
  };
}

function batchOf(start: number, destination: string): OutboxEvent[] {
  return Array.from({ length: Math.min(BATCH, MESSAGES - start) }, (_, j) => event(start + j, destination));
}

const sample = buildKafkaRecord(event(0, 'x'), 'x');
if (!sample.ok) throw new Error(sample.reason);
log(
  `Kafka drain benchmark: ${fmtInt(MESSAGES)} messages, value ${sample.record.value.length} bytes (at most ${sample.record.bytes} with key, ${Object.keys(sample.record.headers).length} headers and framing), ${KEYS} keys, batches of ${BATCH}, broker ${BROKER}`,
);

async function freshTopic(): Promise<string> {
  const topic = `txbox-bench-${run}-${topics.length + 1}`;
  await admin.createTopics({ topics: [{ topic, numPartitions: 6 }], waitForLeaders: true });
  topics.push(topic);
  return topic;
}

async function stored(topic: string): Promise<number> {
  const offsets = await admin.fetchTopicOffsets(topic);
  return offsets.reduce((n, o) => n + Number(o.high) - Number(o.low), 0);
}

interface Result {
  readonly mode: string;
  readonly perSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly cpu: number;
  readonly stored: number;
}

/** Runs `lanes` loops that each take the next batch start and call `send`; times every call. */
async function measure(mode: string, lanes: number, send: (lane: number, start: number, topic: string) => Promise<void>): Promise<Result> {
  const topic = await freshTopic();
  await send(0, -1, topic); // warm-up: connects, fetches metadata (not counted)
  const latencies: number[] = [];
  let next = 0;
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      while (next < MESSAGES) {
        const start = next;
        next += BATCH;
        const t0 = performance.now();
        await send(lane, start, topic);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  const count = (await stored(topic)) - 1; // minus the warm-up message
  if (count !== MESSAGES) log(`  WARNING: ${topic} holds ${fmtInt(count)} records, expected ${fmtInt(MESSAGES)}`);
  const result = { mode, perSec: perSec(MESSAGES, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99), cpu: ((cpu.user + cpu.system) / 1000 / ms) * 100, stored: count };
  log(`${mode}: ${fmtInt(result.perSec)} msg/s, p50 ${result.p50.toFixed(1)} ms, p99 ${result.p99.toFixed(1)} ms per batch, client CPU ${result.cpu.toFixed(0)}%`);
  return result;
}

/** The transport's producer, as KafkaTransport opens it, sending pre-built records (building is timed too: it is part of publishing). */
async function rawSend(lanes: number): Promise<Result> {
  const client = createKafkaClient(resolveKafkaTransportOptions({ brokers: [BROKER], clientId: 'txbox-bench' }));
  const producers = await Promise.all(Array.from({ length: lanes }, () => client.openProducer()));
  try {
    return await measure(`raw send, ${lanes} in flight`, lanes, async (lane, start, topic) => {
      const events = start < 0 ? [event(0, topic)] : batchOf(start, topic);
      const records: KafkaRecord[] = events.map((e) => {
        const r = buildKafkaRecord(e, topic);
        if (!r.ok) throw new Error(r.reason);
        return r.record;
      });
      await producers[lane]!.send(records);
    });
  } finally {
    await Promise.all(producers.map((p) => p.close()));
  }
}

async function viaTransport(lanes: number): Promise<Result> {
  const transport = new KafkaTransport({ brokers: [BROKER], clientId: 'txbox-bench', producers: lanes });
  await transport.start();
  const signal = new AbortController().signal;
  let failed = 0;
  try {
    return await measure(`KafkaTransport.publish, ${lanes} in flight`, lanes, async (_, start, topic) => {
      for (const o of await transport.publish(start < 0 ? [event(0, topic)] : batchOf(start, topic), signal)) if (!o.ok) failed++;
    });
  } finally {
    await transport.close();
    if (failed > 0) log(`  WARNING: ${failed} events failed`);
  }
}

const results: Result[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const lanes of [1, 2]) results.push(await rawSend(lanes));
    for (const lanes of [1, 2]) results.push(await viaTransport(lanes));
    await admin.deleteTopics({ topics: topics.splice(0) });
  }
} finally {
  if (topics.length > 0) await admin.deleteTopics({ topics }).catch(() => {});
  await admin.disconnect();
}

const best = new Map<string, Result>();
for (const r of results) if ((best.get(r.mode)?.perSec ?? -1) < r.perSec) best.set(r.mode, r);
const base = best.get('raw send, 1 in flight')!.perSec;
console.log(`\nKafka publish, idempotent, acks=all, 6 partitions, ${fmtInt(MESSAGES)} messages in batches of ${BATCH} (best of ${ROUNDS}):`);
printTable(
  ['mode', 'msg/s', 'vs raw 1', 'p50 ms', 'p99 ms', 'client CPU', 'records stored'],
  [...best.values()].map((r) => [r.mode, fmtInt(r.perSec), `${((r.perSec / base) * 100).toFixed(0)}%`, r.p50.toFixed(1), r.p99.toFixed(1), `${r.cpu.toFixed(0)}%`, fmtInt(r.stored)]),
);
summary('kafka-drain', [...best.values()].map((r) => `${r.mode} ${fmtInt(r.perSec)} msg/s`).join(', '));
