/**
 * NatsConsumer throughput: a stream pre-loaded with BENCH_NC_EVENTS (20,000)
 * events over BENCH_NC_KEYS (200) keys, published with NatsTransport; one
 * consumer process drains it through the inbox (PostgreSQL) with one
 * projection upsert per event (`applyVersioned`). Prints events/s and the
 * p50/p99 handler-commit latency (from handing an event to the inbox until
 * its transaction committed). For comparison, the same inbox work without
 * NATS (events handed to `inbox.process` through a KeyedDispatcher of the
 * same concurrency): the database's limit for this handler in the same run;
 * and worker mode, where the consumer only stores each pull in the inbox
 * queue (one transaction per batch) and acks: the consumer's own pace.
 *
 *   node --conditions=txbox-source --import tsx bench/nats-consumer.ts
 *
 * Settings (environment): BENCH_NC_EVENTS (20000), BENCH_NC_KEYS (200),
 * BENCH_NC_CONCURRENCY (comma list, 32,128), BENCH_NC_BATCH (100),
 * BENCH_NC_POOL (pg pool size, 16), BENCH_NATS_SERVERS (127.0.0.1:4222).
 */
import { randomBytes } from 'node:crypto';
import { connect, nanos } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { createInbox, InboxQueue, KeyedDispatcher, uuidv7, type Inbox, type OutboxEvent } from 'txbox';
import { NatsConsumer } from 'txbox/nats';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore, PostgresOutboxStore } from 'txbox/postgres';
import { NatsTransport } from 'txbox/nats';
import { envInt, envList, fmtInt, log, orderPayload, percentile, perSec, printTable, summary, withBench, type Bench } from './lib.ts';

const EVENTS = envInt('BENCH_NC_EVENTS', 20_000);
const KEYS = envInt('BENCH_NC_KEYS', 200);
const CONCURRENCY = envList('BENCH_NC_CONCURRENCY', [32, 128]);
const BATCH = envInt('BENCH_NC_BATCH', 100);
const POOL = envInt('BENCH_NC_POOL', 16);
const SERVERS = process.env.BENCH_NATS_SERVERS ?? '127.0.0.1:4222';
const run = randomBytes(3).toString('hex');
const STREAM = `TXBOX_BENCH_NC_${run}`;
const SUBJECT = `txboxbench.nc.${run}`;

interface Result {
  readonly mode: string;
  readonly concurrency: number;
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

function benchInbox(bench: Bench, consumer: string, latencies: number[]): Inbox {
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), consumer });
  inbox.on('OrderPlaced', async (event, tx) => {
    const p = event.payload as ReturnType<typeof orderPayload>;
    await applyVersioned(tx, {
      table: `${bench.schema}.customer_view`,
      id: { consumer, customer_id: event.aggregateId },
      version: event.version!,
      values: { last_order: p.orderId, total: p.total },
    });
  });
  inbox.events.on('processed', (e) => latencies.push(e.durationMs));
  return inbox;
}

async function inboxOnly(bench: Bench, events: readonly OutboxEvent[], concurrency: number): Promise<Result> {
  const latencies: number[] = [];
  const inbox = benchInbox(bench, `direct_${concurrency}`, latencies);
  const dispatcher = new KeyedDispatcher(concurrency);
  const started = performance.now();
  for (const e of events) void dispatcher.push(e.key, async () => void (await inbox.process(e)));
  await dispatcher.onIdle();
  const ms = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { mode: 'inbox only, no NATS', concurrency, perSec: perSec(events.length, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

async function viaConsumer(bench: Bench, concurrency: number): Promise<Result> {
  const latencies: number[] = [];
  const durable = `bench_${concurrency}`;
  const inbox = benchInbox(bench, durable, latencies);
  const consumer = new NatsConsumer({ servers: SERVERS, stream: STREAM, durable, inbox, concurrency, batch: BATCH, deadLetterSubject: null });
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  consumer.events.on('settled', () => {
    if (consumer.stats.processed + consumer.stats.duplicate >= EVENTS) done();
  });
  const started = performance.now();
  await consumer.start();
  await finished;
  const ms = performance.now() - started;
  await consumer.stop();
  latencies.sort((a, b) => a - b);
  if (consumer.stats.processed !== EVENTS) log(`  WARNING: processed ${consumer.stats.processed}, expected ${EVENTS}`);
  return { mode: 'NatsConsumer + inbox', concurrency, perSec: perSec(EVENTS, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

/** Worker mode: the consumer only stores each pull's events in the inbox queue (one transaction per batch) and acks. */
async function viaQueue(bench: Bench): Promise<Result> {
  const queue = new InboxQueue(new PostgresOutboxStore({ schema: bench.schema, onDuplicateId: 'ignore' }), (fn) => bench.connection.transaction(fn));
  const consumer = new NatsConsumer({ servers: SERVERS, stream: STREAM, durable: 'bench_queue', queue, batch: BATCH, deadLetterSubject: null });
  const latencies: number[] = [];
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  consumer.events.on('settled', (e) => {
    latencies.push(e.durationMs);
    if (consumer.stats.queued >= EVENTS) done();
  });
  const started = performance.now();
  await consumer.start();
  await finished;
  const ms = performance.now() - started;
  await consumer.stop();
  latencies.sort((a, b) => a - b);
  return { mode: 'NatsConsumer, worker mode (queue only)', concurrency: 1, perSec: perSec(EVENTS, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

await withBench(
  'natsconsumer',
  async (bench) => {
    await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
    await bench.sql(`CREATE TABLE "${bench.schema}".customer_view (consumer text, customer_id text, last_order text, total int, version int NOT NULL, PRIMARY KEY (consumer, customer_id))`);
    const nc = await connect({ servers: SERVERS, name: 'txbox-bench-admin', noAsyncTraces: true });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: STREAM, subjects: [SUBJECT], storage: StorageType.File, duplicate_window: nanos(120_000) });
    try {
      const events = buildEvents();
      const transport = new NatsTransport({ connection: nc, subjects: { orders: SUBJECT }, streams: { orders: STREAM }, publishTimeoutMs: 30_000 });
      await transport.start();
      const loading = performance.now();
      for (let i = 0; i < events.length; i += KEYS) {
        const outcomes = await transport.publish(events.slice(i, i + KEYS), AbortSignal.timeout(60_000));
        if (outcomes.some((o) => !o.ok)) throw new Error('pre-loading the stream failed');
      }
      await transport.close();
      log(`stream ${STREAM} pre-loaded with ${fmtInt(EVENTS)} events over ${KEYS} keys in ${fmtInt(performance.now() - loading)} ms; pg pool ${POOL}, batch ${BATCH}`);
      const results: Result[] = [];
      for (const concurrency of CONCURRENCY) {
        results.push(await viaConsumer(bench, concurrency));
        log(`NatsConsumer, concurrency ${concurrency}: ${fmtInt(results.at(-1)!.perSec)} events/s`);
        results.push(await inboxOnly(bench, events, concurrency));
        log(`inbox only, concurrency ${concurrency}: ${fmtInt(results.at(-1)!.perSec)} events/s`);
      }
      results.push(await viaQueue(bench));
      log(`NatsConsumer, worker mode: ${fmtInt(results.at(-1)!.perSec)} events/s stored in the inbox queue`);
      console.log(`\n${fmtInt(EVENTS)} events over ${KEYS} keys, inbox + one applyVersioned upsert per event (worker mode: stored only), one process:`);
      printTable(
        ['mode', 'concurrency', 'events/s', 'p50 ms', 'p99 ms'],
        results.map((r) => [r.mode, String(r.concurrency), fmtInt(r.perSec), r.p50.toFixed(1), r.p99.toFixed(1)]),
      );
      const best = results.filter((r) => r.mode === 'NatsConsumer + inbox').sort((a, b) => b.perSec - a.perSec)[0]!;
      const direct = results.filter((r) => r.mode.startsWith('inbox only')).sort((a, b) => b.perSec - a.perSec)[0]!;
      const queued = results.at(-1)!;
      summary(
        'nats-consumer',
        `${fmtInt(best.perSec)} events/s with the inbox (concurrency ${best.concurrency}), handler-commit p50 ${best.p50.toFixed(1)} ms, p99 ${best.p99.toFixed(1)} ms; ` +
          `same inbox work without NATS ${fmtInt(direct.perSec)} events/s; worker mode ${fmtInt(queued.perSec)} events/s stored`,
      );
    } finally {
      await jsm.streams.delete(STREAM).catch(() => {});
      await nc.close();
    }
  },
  POOL,
);
