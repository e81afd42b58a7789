/**
 * What one dashboard sample costs the database: the sampler runs it every
 * `sampleIntervalMs` (default 5 s, `txbox dashboard --sample-every`) whatever
 * the number of open pages. A sample is the outbox status, the open circuits,
 * the parked list, the published-per-destination count and, with an inbox,
 * its status and its dead and held lists. Prints p50/p99 of BENCH_RUNS
 * samples on a backlog of BENCH_EVENTS pending rows with BENCH_PUBLISHED
 * published in the last minute, without and with an inbox of BENCH_INBOX
 * processed rows, and that time as a share of the default interval (wall
 * time: the queries of a sample run side by side, so the database may spend
 * more CPU than that); and the heap its history ring holds when full (720
 * samples). Figures, never assertions.
 *
 *   node --conditions=txbox-source --import tsx bench/dashboard-sample.ts
 *   BENCH_EVENTS=1000000 BENCH_INBOX=1000000 ...
 */
import { PostgresAdmin, PostgresInboxAdmin, inboxNames, migrateInbox } from 'txbox/postgres';
import { silentLogger } from 'txbox';
import { DashboardSampler } from '../src/dashboard/dashboard-sampler.ts';
import { envInt, mb, median, percentile, printTable, summary, withBench } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 100_000);
const PUBLISHED = envInt('BENCH_PUBLISHED', 20_000);
const INBOX = envInt('BENCH_INBOX', 200_000);
const RUNS = envInt('BENCH_RUNS', 20);

async function time(sampler: DashboardSampler): Promise<{ p50: number; p99: number }> {
  await sampler.refresh(); // warm the plan cache and the buffers
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await sampler.refresh();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return { p50: median(ms), p99: percentile(ms, 99) };
}

await withBench('dashboard', async (bench) => {
  const n = bench.names;
  await bench.sql(`INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, key, destination, payload)
    SELECT gen_random_uuid(), 'OrderPlaced', 'Order', (i % 10000)::text, 'Order:' || (i % 10000), 'd' || (i % 3), '{}'
    FROM generate_series(1, $1::int) i`, [EVENTS]);
  await bench.sql(`INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, key, destination, payload, state, done_at)
    SELECT gen_random_uuid(), 'OrderPlaced', 'Order', (i % 10000)::text, 'Order:' || (i % 10000), 'd' || (i % 3), '{}', 'published', now() - (i % 60) * interval '1 second'
    FROM generate_series(1, $1::int) i`, [PUBLISHED]);
  await bench.sql(`UPDATE ${n.outbox} SET state = 'parked', parked_at = now(), last_error = 'HTTP 400' WHERE seq IN (SELECT min(seq) FROM ${n.outbox} GROUP BY key ORDER BY 1 LIMIT 10)`);
  const inboxTable = inboxNames({ schema: bench.schema });
  await migrateInbox(bench.connection, inboxTable);
  await bench.sql(`INSERT INTO ${inboxTable.outbox} (consumer, event_id, type, key, status, processed_at)
    SELECT 'c' || (i % 4), gen_random_uuid(), 'StockChanged', 'Sku:' || (i % 5000), CASE WHEN i % 10000 = 0 THEN 'dead' ELSE 'processed' END, now() - (i % 600) * interval '1 second'
    FROM generate_series(1, $1::int) i`, [INBOX]);
  await bench.sql(`VACUUM ANALYZE ${n.outbox}`);
  await bench.sql(`VACUUM ANALYZE ${inboxTable.outbox}`);

  const admin = new PostgresAdmin(bench.connection, { schema: bench.schema });
  const inboxAdmin = new PostgresInboxAdmin(bench.connection, { schema: bench.schema });
  const options = { admin, intervalMs: 5000, historyMs: 3_600_000, listLimit: 100, showPayloads: false, logger: silentLogger };
  const rows: string[][] = [];
  for (const [label, sampler] of [
    ['outbox only', new DashboardSampler({ ...options, inboxAdmin: null })],
    [`outbox + inbox of ${INBOX} rows`, new DashboardSampler({ ...options, inboxAdmin })],
  ] as const) {
    const t = await time(sampler);
    rows.push([label, t.p50.toFixed(1), t.p99.toFixed(1), `${((100 * t.p50) / 5000).toFixed(1)}%`]);
    await sampler.stop();
  }
  printTable([`sample (${EVENTS} pending, ${PUBLISHED} published, 10 parked)`, 'p50 ms', 'p99 ms', 'p50 / the 5 s interval'], rows);

  // The history ring when full: 720 samples of 3 destinations (one hour at 5 s).
  global.gc?.();
  const before = process.memoryUsage().heapUsed;
  const ring = new DashboardSampler({ ...options, inboxAdmin: null, intervalMs: 1, historyMs: 720 });
  for (let i = 0; i < 720; i++) await ring.refresh();
  global.gc?.();
  const heap = process.memoryUsage().heapUsed - before;
  await ring.stop();
  console.log(`\nheap held by a full history ring (720 samples, 3 destinations) and the last snapshot: ${mb(heap)} MB${global.gc ? '' : ' (run with --expose-gc for a steadier figure)'}; rss ${mb(process.memoryUsage().rss)} MB`);
  summary('dashboard-sample', rows.map((r) => `${r[0]}: p50 ${r[1]} ms, p99 ${r[2]} ms`).join('; '));
});
