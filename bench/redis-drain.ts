/**
 * Redis Streams drain limit: how fast events of about 300 bytes can be added
 * to a stream with no database involved, as raw XADD pipelines on the same
 * ioredis client the transport uses, with MAXLEN trimming, and through
 * RedisTransport.publish() (serialization, size check, outcomes). The relay's
 * Redis throughput is judged against these figures. Prints figures; asserts nothing.
 *
 *   node --conditions=txbox-source --import tsx bench/redis-drain.ts
 *
 * Settings (environment): BENCH_REDIS_URL (redis://127.0.0.1:6379),
 * BENCH_EVENTS (200000), BENCH_BATCH (500), BENCH_REDIS_CONCURRENCY (1,2):
 * pipelines in flight at once (the relay's lanes), BENCH_REPEAT (3).
 */
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { uuidv7, type OutboxEvent } from 'txbox';
import { RedisTransport, encodeStreamFields } from 'txbox/redis';
import { envInt, envList, fmtInt, log, median, orderPayload, perSec, printTable, summary } from './lib.ts';

export interface RedisDrainOptions {
  readonly url: string;
  readonly events: number;
  /** Events per pipeline (per publish call). */
  readonly batch: number;
  /** Pipelines in flight at once. */
  readonly concurrency: number;
}

export interface RedisDrainResult {
  readonly mode: 'xadd' | 'xadd-maxlen' | 'transport';
  readonly concurrency: number;
  readonly events: number;
  readonly ms: number;
  readonly eventsPerSecond: number;
  /** Average bytes of one entry (field names and values). */
  readonly entryBytes: number;
}

/** Distinct events reused in a ring, so that memory stays flat for any BENCH_EVENTS. */
const RING = 10_000;

function benchEvent(i: number, destination: string): OutboxEvent {
  const customer = i % 1000;
  return {
    id: uuidv7(),
    type: 'OrderPlaced',
    aggregateType: 'Order',
    aggregateId: `c${customer}`,
    key: `Order:c${customer}`,
    destination,
    payload: orderPayload(i, customer),
    headers: { 'content-type': 'application/json' },
    occurredAt: new Date(),
    version: Math.floor(i / 1000) + 1,
  };
}

/** Runs `send` for every batch of `o.events`, with `o.concurrency` batches in flight; returns the elapsed ms. */
async function drive(o: RedisDrainOptions, send: (from: number, count: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async (): Promise<void> => {
    while (next < o.events) {
      const from = next;
      const count = Math.min(o.batch, o.events - from);
      next += count;
      await send(from, count);
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  return performance.now() - started;
}

/** Raw XADD pipelines of prebuilt entries (`maxLen` adds `MAXLEN ~ n`). */
export async function redisXaddRate(o: RedisDrainOptions, maxLen?: number): Promise<RedisDrainResult> {
  const client = new Redis(o.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  await client.connect();
  const stream = `txbox-bench:${randomBytes(4).toString('hex')}:orders`;
  const ring = Array.from({ length: Math.min(RING, o.events) }, (_, i) => encodeStreamFields(benchEvent(i, 'orders')));
  const trim = maxLen === undefined ? [] : ['MAXLEN', '~', String(maxLen)];
  try {
    const ms = await drive(o, async (from, count) => {
      const pipeline = client.pipeline();
      for (let i = from; i < from + count; i++) pipeline.xadd(stream, ...trim, '*', ...ring[i % ring.length]!);
      const replies = await pipeline.exec();
      const failed = replies?.find(([err]) => err !== null);
      if (!replies || failed) throw new Error(`XADD failed: ${failed?.[0]?.message ?? 'no replies'}`);
    });
    const entryBytes = ring.reduce((sum, f) => sum + f.reduce((s, v) => s + Buffer.byteLength(v), 0), 0) / ring.length;
    return { mode: maxLen === undefined ? 'xadd' : 'xadd-maxlen', concurrency: o.concurrency, events: o.events, ms, eventsPerSecond: perSec(o.events, ms), entryBytes };
  } finally {
    await client.del(stream);
    await client.quit();
  }
}

/** The same events through RedisTransport.publish(), one call per batch. */
export async function redisTransportRate(o: RedisDrainOptions): Promise<RedisDrainResult> {
  const prefix = `txbox-bench:${randomBytes(4).toString('hex')}:`;
  const transport = new RedisTransport({ url: o.url, streamPrefix: prefix });
  await transport.start(new AbortController().signal);
  const ring = Array.from({ length: Math.min(RING, o.events) }, (_, i) => benchEvent(i, 'orders'));
  const signal = new AbortController().signal;
  try {
    const ms = await drive(o, async (from, count) => {
      const events = Array.from({ length: count }, (_, k) => ring[(from + k) % ring.length]!);
      const outcomes = await transport.publish(events, signal);
      const failed = outcomes.find((x) => !x.ok);
      if (failed && !failed.ok) throw failed.error;
    });
    const entryBytes = ring.reduce((sum, e) => sum + encodeStreamFields(e).reduce((s, v) => s + Buffer.byteLength(v), 0), 0) / ring.length;
    return { mode: 'transport', concurrency: o.concurrency, events: o.events, ms, eventsPerSecond: perSec(o.events, ms), entryBytes };
  } finally {
    await transport.close();
    const cleanup = new Redis(o.url);
    await cleanup.del(`${prefix}orders`);
    await cleanup.quit();
  }
}

/** Median figure of each mode and concurrency over the repeats, with the spread. */
export interface RedisDrainFigure {
  readonly mode: RedisDrainResult['mode'];
  readonly concurrency: number;
  readonly medianEventsPerSecond: number;
  readonly minEventsPerSecond: number;
  readonly maxEventsPerSecond: number;
  readonly entryBytes: number;
}

/**
 * Every mode at every concurrency, `repeats` times interleaved (so that a
 * noisy spell of a shared machine does not land on one mode), after a short
 * warm-up; what the main bench calls.
 */
export async function runRedisDrainBench(base: Omit<RedisDrainOptions, 'concurrency'>, concurrencies: readonly number[], repeats = 3): Promise<RedisDrainFigure[]> {
  const warm = { ...base, events: Math.min(base.events, 20_000), concurrency: 1 };
  await redisXaddRate(warm);
  await redisTransportRate(warm);
  const runs = new Map<string, RedisDrainResult[]>();
  for (let rep = 1; rep <= repeats; rep++) {
    for (const concurrency of concurrencies) {
      const o = { ...base, concurrency };
      for (const run of [() => redisXaddRate(o), () => redisXaddRate(o, 100_000), () => redisTransportRate(o)]) {
        const r = await run();
        log(`run ${rep}/${repeats}: ${r.mode}, pipelines of ${o.batch}, ${concurrency} in flight: ${fmtInt(r.events)} events in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(r.eventsPerSecond)} events/s`);
        const key = `${r.mode}/${concurrency}`;
        runs.set(key, [...(runs.get(key) ?? []), r]);
      }
    }
  }
  return [...runs.values()].map((rs) => {
    const rates = rs.map((r) => r.eventsPerSecond);
    return { mode: rs[0]!.mode, concurrency: rs[0]!.concurrency, medianEventsPerSecond: median(rates), minEventsPerSecond: Math.min(...rates), maxEventsPerSecond: Math.max(...rates), entryBytes: rs[0]!.entryBytes };
  });
}

const LABELS: Record<RedisDrainResult['mode'], string> = { xadd: 'raw XADD pipeline', 'xadd-maxlen': 'raw XADD MAXLEN ~ 100000', transport: 'RedisTransport.publish' };

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
  const events = envInt('BENCH_EVENTS', 200_000);
  const batch = envInt('BENCH_BATCH', 500);
  const repeats = envInt('BENCH_REPEAT', 3);
  const concurrencies = envList('BENCH_REDIS_CONCURRENCY', [1, 2]);
  log(`redis drain benchmark: ${fmtInt(events)} events of ~300-byte payloads, pipelines of ${batch}, ${repeats} runs each, no database, ${new URL(url).host}`);
  const figures = await runRedisDrainBench({ url, events, batch }, concurrencies, repeats);
  console.log(`\nRedis Streams drain limit (events/s, no database; median of ${repeats}, min-max):`);
  printTable(
    ['mode', 'in flight', 'median events/s', 'min-max', 'entry bytes'],
    figures.map((f) => [LABELS[f.mode], String(f.concurrency), fmtInt(f.medianEventsPerSecond), `${fmtInt(f.minEventsPerSecond)}-${fmtInt(f.maxEventsPerSecond)}`, fmtInt(f.entryBytes)]),
  );
  const best = (mode: RedisDrainResult['mode']): number => Math.max(...figures.filter((f) => f.mode === mode).map((f) => f.medianEventsPerSecond));
  summary('redis-drain', `raw XADD ${fmtInt(best('xadd'))} events/s, RedisTransport.publish ${fmtInt(best('transport'))} events/s (pipelines of ${batch}, median of ${repeats})`);
}
