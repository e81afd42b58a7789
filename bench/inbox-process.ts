/**
 * Inbox.process with a version-guarded projection, no broker: BENCH_KEYS keys
 * (default 64) each handled in order, all keys at once (as a consumer with
 * that much key concurrency), BENCH_VERSIONS versions per key (default 200),
 * each event one `applyVersioned` upsert with `onGap: 'hold'` in the inbox
 * transaction (group commit on, the default). Prints throughput, p50/p99 of
 * one `process` call, and RSS. For the cost of the per-key advisory lock that
 * serializes versioned inbox transactions (docs/inbox.md, "Held events"),
 * run it on this commit and on one before the lock, alternately, on the same
 * machine, and compare the ratio. Never asserts timings.
 *
 *   node --conditions=txbox-source --import tsx bench/inbox-process.ts
 */
import { createInbox, type OutboxEvent } from 'txbox';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { envInt, fmtInt, log, percentile, perSec, summary, withBench } from './lib.ts';

const KEYS = envInt('BENCH_KEYS', 64);
const VERSIONS = envInt('BENCH_VERSIONS', 200);

await withBench('inbox_process', async (bench) => {
  await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
  await bench.sql(`CREATE TABLE "${bench.schema}".view (key text PRIMARY KEY, n int NOT NULL, version bigint NOT NULL)`);
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), consumer: 'bench' });
  inbox.on('Changed', async (e: OutboxEvent, tx) => {
    await applyVersioned(tx, { table: `${bench.schema}.view`, id: { key: e.key }, version: e.version!, values: { n: e.version }, onGap: 'hold' });
  });
  const event = (k: number, v: number): OutboxEvent => ({
    id: crypto.randomUUID(),
    type: 'Changed',
    aggregateType: 'Item',
    aggregateId: String(k),
    key: `Item:${k}`,
    destination: 'items',
    payload: { v },
    headers: {},
    occurredAt: new Date(),
    version: v,
  });
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: KEYS }, async (_, k) => {
      for (let v = 1; v <= VERSIONS; v++) {
        const t = performance.now();
        const outcome = await inbox.process(event(k, v));
        latencies.push(performance.now() - t);
        if (outcome.status !== 'processed') throw new Error(`unexpected ${outcome.status}`);
      }
    }),
  );
  const ms = performance.now() - started;
  latencies.sort((a, b) => a - b);
  const n = KEYS * VERSIONS;
  const rssMb = process.memoryUsage().rss / 1024 / 1024;
  log(`${fmtInt(n)} events over ${KEYS} keys in ${fmtInt(ms)} ms: ${fmtInt(perSec(n, ms))} events/s, process() p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms, RSS ${rssMb.toFixed(0)} MB`);
  summary('inbox-process', `${fmtInt(perSec(n, ms))} events/s, p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms (${KEYS} keys x ${VERSIONS} versions)`);
});
