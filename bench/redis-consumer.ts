/**
 * Redis Streams consumer throughput: events pre-loaded in a stream (20,000
 * over 200 keys, 100 versions each, ~300-byte payloads) read by one
 * RedisConsumer with a PostgreSQL inbox and one version-guarded projection
 * upsert per event (`applyVersioned`). Prints events/s and the p50/p99
 * handler-commit latency (from handing an entry to the inbox until its
 * transaction committed). Reference figures from the same run frame it: the
 * same inbox + upsert work driven directly (no Redis: what the database
 * allows for this work), the consumer with an in-memory inbox store (no
 * database: the consumer's and Redis's own limit), and plain single-row
 * INSERT commits from as many clients (the database's commit rate). Rows are
 * "mode", events/s and the p50/p99 per-event latency (for insert commits,
 * per INSERT). Prints figures; asserts nothing.
 *
 *   node --conditions=txbox-source --import tsx bench/redis-consumer.ts
 *
 * Settings (environment): BENCH_REDIS_URL (redis://127.0.0.1:6379),
 * BENCH_EVENTS (20000), BENCH_KEYS (200), BENCH_CONCURRENCY (16),
 * BENCH_COUNT (100: entries per XREADGROUP), BENCH_REPEAT (3).
 */
import { randomBytes } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { Redis } from 'ioredis';
import { createInbox, KeyedDispatcher, uuidv7, type Inbox, type InboxStore, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, applyVersioned, inboxNames, migrateInbox } from 'txbox/postgres';
import { RedisConsumer, encodeStreamFields } from 'txbox/redis';
import { envInt, fmtInt, log, median, memoryInboxStore, orderPayload, percentile, perSec, printTable, summary, withBench, type Bench } from './lib.ts';

const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const EVENTS = envInt('BENCH_EVENTS', 20_000);
const KEYS = envInt('BENCH_KEYS', 200);
const CONCURRENCY = envInt('BENCH_CONCURRENCY', 16);
const COUNT = envInt('BENCH_COUNT', 100);
const REPEAT = envInt('BENCH_REPEAT', 3);

interface Run {
  readonly mode: string;
  readonly ms: number;
  readonly latencies: number[];
}

/** Events in stream order: version 1 of every key, then version 2, ... */
function makeEvents(): OutboxEvent[] {
  return Array.from({ length: EVENTS }, (_, i) => {
    const key = i % KEYS;
    return {
      id: uuidv7(),
      type: 'ItemChanged',
      aggregateType: 'Item',
      aggregateId: `i${key}`,
      key: `Item:i${key}`,
      destination: 'items',
      payload: { ...orderPayload(i, key), total: i },
      headers: { 'content-type': 'application/json' },
      occurredAt: new Date(),
      version: Math.floor(i / KEYS) + 1,
    };
  });
}

function projectingInbox(bench: Bench, consumer: string, store: InboxStore): Inbox {
  const inbox = createInbox({ store, consumer });
  inbox.on('ItemChanged', async (event, tx) => {
    await applyVersioned(tx, { table: `${bench.schema}.items_view`, id: { item_id: event.aggregateId }, version: event.version!, values: { total: (event.payload as { total: number }).total } });
  });
  return inbox;
}

async function preload(admin: Redis, stream: string, events: readonly OutboxEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 1000) {
    const pipeline = admin.pipeline();
    for (const e of events.slice(i, i + 1000)) pipeline.xadd(stream, '*', ...encodeStreamFields(e));
    await pipeline.exec();
  }
}

async function consumerRun(mode: string, admin: Redis, events: readonly OutboxEvent[], inbox: Inbox): Promise<Run> {
  const stream = `txbox-bench:${randomBytes(4).toString('hex')}:items`;
  await preload(admin, stream, events);
  const consumer = new RedisConsumer({ url, streams: [stream], group: inbox.consumer, inbox, concurrency: CONCURRENCY, count: COUNT, blockMs: 1000 });
  const latencies: number[] = [];
  consumer.events.on('settled', (s) => latencies.push(s.durationMs));
  const started = performance.now();
  await consumer.start();
  await new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (consumer.stats.acked >= events.length) (clearInterval(timer), resolve());
      else if (performance.now() - started > 600_000) (clearInterval(timer), reject(new Error(`${mode}: only ${consumer.stats.acked} acked after 10 min`)));
    }, 5);
  });
  const ms = performance.now() - started;
  await consumer.stop();
  await admin.del(stream, `${stream}:dead`);
  return { mode, ms, latencies };
}

/** The same inbox work without Redis: KeyedDispatcher over the events, as the consumer would run them. */
async function directRun(events: readonly OutboxEvent[], inbox: Inbox): Promise<Run> {
  const dispatcher = new KeyedDispatcher(CONCURRENCY);
  const latencies: number[] = [];
  const started = performance.now();
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    void dispatcher.push(e.key, async () => {
      const t = performance.now();
      await inbox.process(e);
      latencies.push(performance.now() - t);
    });
    if (dispatcher.size >= 2 * CONCURRENCY) await new Promise<void>((r) => setImmediate(r));
  }
  await dispatcher.onIdle();
  return { mode: 'direct', ms: performance.now() - started, latencies };
}

/** The database's plain limit in the same run: single-row INSERT commits from `CONCURRENCY` clients (at most 16). */
async function commitRun(bench: Bench): Promise<Run> {
  await bench.sql(`CREATE TABLE IF NOT EXISTS "${bench.schema}".commits (n int NOT NULL)`);
  let next = 0;
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(CONCURRENCY, 16) }, async () => {
      while (next < EVENTS) {
        const n = next++;
        const t = performance.now();
        await bench.pool.query(`INSERT INTO "${bench.schema}".commits (n) VALUES ($1)`, [n]);
        latencies.push(performance.now() - t);
      }
    }),
  );
  return { mode: 'insert commits', ms: performance.now() - started, latencies };
}

const load = (): string => `load average ${loadavg().map((l) => l.toFixed(2)).join(' ')} on ${availableParallelism()} CPUs`;

await withBench(
  'redis_consumer',
  async (bench) => {
    log(`redis-consumer: ${EVENTS} events over ${KEYS} keys, concurrency ${CONCURRENCY}, count ${COUNT}, ${REPEAT} runs; ${load()}`);
    await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
    await bench.sql(`CREATE TABLE "${bench.schema}".items_view (item_id text PRIMARY KEY, version int NOT NULL, total int NOT NULL)`);
    const store = new PostgresInboxStore({ connection: bench.connection, schema: bench.schema });
    const admin = new Redis(url, { lazyConnect: true });
    await admin.connect();
    const runs: Run[] = [];
    try {
      for (let r = 1; r <= REPEAT; r++) {
        const events = makeEvents();
        const modes = [
          ['redis+postgres', () => consumerRun('redis+postgres', admin, events, projectingInbox(bench, `bench-redis-${r}`, store))],
          ['direct', () => directRun(events, projectingInbox(bench, `bench-direct-${r}`, store))],
          ['redis+memory', () => consumerRun('redis+memory', admin, events, projectingInbox(bench, `bench-memory-${r}`, memoryInboxStore()))],
          ['insert commits', () => commitRun(bench)],
        ] as const;
        // Alternate the order between runs, so that no mode always runs first on a fresh projection.
        for (const [mode, run] of r % 2 === 1 ? modes : [...modes].reverse()) {
          await bench.sql(`TRUNCATE "${bench.schema}".items_view`);
          const result = await run();
          runs.push(result);
          log(`run ${r} ${mode}: ${fmtInt(perSec(EVENTS, result.ms))} events/s (${load()})`);
        }
      }
    } finally {
      await admin.quit();
    }
    const rows = ['redis+postgres', 'direct', 'redis+memory', 'insert commits'].map((mode) => {
      const mine = runs.filter((r) => r.mode === mode);
      const rates = mine.map((r) => perSec(EVENTS, r.ms));
      const lat = mine.flatMap((r) => r.latencies).sort((a, b) => a - b);
      return [mode, fmtInt(median(rates)), `${fmtInt(Math.min(...rates))}-${fmtInt(Math.max(...rates))}`, percentile(lat, 50).toFixed(1), percentile(lat, 99).toFixed(1)];
    });
    printTable(['mode', 'events/s (median)', 'range', 'p50 ms', 'p99 ms'], rows);
    summary(
      'redis-consumer',
      `${rows[0]![1]} events/s with the inbox and one projection upsert per event (p50 ${rows[0]![3]} ms, p99 ${rows[0]![4]} ms); same work without Redis ${rows[1]![1]}/s; in-memory inbox ${rows[2]![1]}/s; plain INSERT commits ${rows[3]![1]}/s`,
    );
  },
  CONCURRENCY + 4,
);
