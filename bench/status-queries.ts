/**
 * What `txbox status` and the relay's summary log cost on a backlog: the
 * per-destination query (with its "pending behind parked" count), the relays
 * query, the whole status, and the relay store's backlog count (run once per
 * summary, default once a minute). Prints median and p99 of BENCH_RUNS runs
 * each, with nothing parked and with BENCH_PARKED_KEYS parked keys, and the
 * plan of the "behind parked" query. Figures, never assertions.
 *
 *   node --conditions=txbox-source --import tsx bench/status-queries.ts
 *   BENCH_EVENTS=1000000 BENCH_KEYS=50000 BENCH_PARKED_KEYS=100 ...
 */
import { PostgresAdmin, PostgresRelayStore } from 'txbox/postgres';
import { envInt, median, percentile, printTable, summary, withBench, type Bench } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 10_000);
const PARKED_KEYS = envInt('BENCH_PARKED_KEYS', 10);
const RUNS = envInt('BENCH_RUNS', 20);

async function time(fn: () => Promise<unknown>): Promise<{ p50: number; p99: number }> {
  await fn(); // warm the plan cache and the buffers
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return { p50: median(ms), p99: percentile(ms, 99) };
}

async function measure(bench: Bench, label: string): Promise<string[][]> {
  const admin = new PostgresAdmin(bench.connection, { schema: bench.schema });
  const store = new PostgresRelayStore({ schema: bench.schema, connection: bench.connection });
  const rows: string[][] = [];
  for (const [name, fn] of [
    ['destinations + behind parked', () => admin.destinationStatus()],
    ['relays', () => admin.relayStatus()],
    ['whole status', () => admin.status()],
    ['relay summary backlog()', () => store.backlog()],
  ] as const) {
    const t = await time(fn);
    rows.push([label, name, t.p50.toFixed(1), t.p99.toFixed(1)]);
  }
  return rows;
}

/** The "pending behind parked" query of PostgresAdmin.destinationStatus, explained with buffers. */
async function explainBehindParked(bench: Bench): Promise<string> {
  const n = bench.names;
  const plan = await bench.sql<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) SELECT o.destination, count(*) AS blocked
    FROM (SELECT key, min(seq) AS seq FROM ${n.outbox} WHERE state = 'parked' GROUP BY key) p
    JOIN ${n.outbox} o ON o.key = p.key AND o.seq > p.seq AND o.state = 'pending'
    GROUP BY o.destination`);
  return plan.map((r) => r['QUERY PLAN']).join('\n');
}

await withBench('status', async (bench) => {
  const n = bench.names;
  await bench.sql(`INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, key, destination, payload)
    SELECT gen_random_uuid(), 'OrderPlaced', 'Order', (i % $2)::text, 'Order:' || (i % $2), 'd' || (i % 3), '{}'
    FROM generate_series(1, $1::int) i`, [EVENTS, KEYS]);
  for (let r = 0; r < 20; r++) {
    await bench.sql(`INSERT INTO ${n.relays} (relay_id, host, pid, lease_ttl_ms, left_at) VALUES ($1, 'h', $2, 30000, CASE WHEN $2 % 2 = 0 THEN now() END)`, [`relay-${r}`, r]);
  }
  await bench.sql(`VACUUM ANALYZE ${n.outbox}`);
  const rows = await measure(bench, `${EVENTS} pending, 0 parked`);
  const empty = await explainBehindParked(bench);
  console.log(`\nplan of "behind parked" with nothing parked:\n${empty}`);
  await bench.sql(`UPDATE ${n.outbox} SET state = 'parked', parked_at = now()
    WHERE seq IN (SELECT min(seq) FROM ${n.outbox} GROUP BY key ORDER BY 1 LIMIT $1)`, [PARKED_KEYS]);
  await bench.sql(`ANALYZE ${n.outbox}`);
  rows.push(...(await measure(bench, `${EVENTS - PARKED_KEYS} pending, ${PARKED_KEYS} parked keys`)));
  printTable(['backlog', 'query', 'p50 ms', 'p99 ms'], rows);
  console.log(`\nplan of "behind parked" with ${PARKED_KEYS} parked keys:\n${await explainBehindParked(bench)}`);
  summary('status-queries', rows.map((r) => `${r[0]} / ${r[1]}: p50 ${r[2]} ms`).join('; '));
});
