/**
 * Soak benchmark: does a relay's heap stay flat over millions of events?
 * One relay (in this process, no-op transport, real PostgreSQL,
 * deleteOnPublish so the table stays small) drains rounds of events loaded
 * through enqueue. After the round that reaches BENCH_SOAK_FIRST events and
 * after the last one (BENCH_SOAK_EVENTS), with the outbox drained and the
 * relay idle, it forces a full GC and reads heapUsed. Verdict: the second
 * figure is within BENCH_SOAK_LIMIT_MB (5) of the first.
 *
 *   node --conditions=txbox-source --import tsx bench/relay-soak.ts
 *
 * Few keys (BENCH_SOAK_KEYS, 10) make many transport calls (a wave carries one
 * event per key: about one call per 10 events), which is what a per-call leak
 * needs to show. Settings: BENCH_SOAK_EVENTS (2000000), BENCH_SOAK_FIRST
 * (200000), BENCH_SOAK_ROUND (100000), BENCH_SOAK_KEYS (10), BENCH_BATCH (500),
 * BENCH_LANES (2), BENCH_SOAK_LIMIT_MB (5).
 */
import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createRelay } from 'txbox';
import { PostgresRelayStore } from 'txbox/postgres';
import { envInt, fmtInt, loadBacklog, log, mb, NoopTransport, perSec, summary, withBench } from './lib.ts';

const TOTAL = envInt('BENCH_SOAK_EVENTS', 2_000_000);
const FIRST = envInt('BENCH_SOAK_FIRST', 200_000);
const ROUND = envInt('BENCH_SOAK_ROUND', 100_000);
const KEYS = envInt('BENCH_SOAK_KEYS', 10);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const LIMIT_MB = envInt('BENCH_SOAK_LIMIT_MB', 5);

// A full GC on demand without asking the caller for --expose-gc.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

await withBench('soak', async (bench) => {
  log(`relay soak: ${fmtInt(TOTAL)} events in rounds of ${fmtInt(ROUND)}, ${KEYS} keys, batch ${BATCH}, lanes ${LANES}, no-op transport, deleteOnPublish; heap measured after ${fmtInt(FIRST)} and ${fmtInt(TOTAL)}`);
  const transport = new NoopTransport();
  const relay = createRelay({
    store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection, deleteOnPublish: true }),
    transport,
    batchSize: BATCH,
    lanes: LANES,
    pollIntervalMs: 50,
    retention: false,
  });
  const errors: string[] = [];
  relay.on('error', (e) => errors.length < 5 && errors.push(`${e.phase}: ${e.error.message}`));
  await relay.start();
  let loaded = 0;
  let drainMs = 0;
  let first: number | undefined;
  let firstAt = 0;
  let last = 0;
  try {
    while (loaded < TOTAL) {
      const n = Math.min(ROUND, TOTAL - loaded);
      await loadBacklog(bench, n, KEYS, 5000, 2);
      loaded += n;
      const started = performance.now();
      while (relay.publishedTotal < loaded) {
        if (errors.length > 0) throw new Error(`relay errors: ${errors.join(' | ')}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      drainMs += performance.now() - started;
      if (first === undefined && loaded >= FIRST) {
        first = heapAfterGc();
        firstAt = loaded;
        log(`after ${fmtInt(loaded)} events (${fmtInt(transport.calls)} transport calls): heap ${mb(first)} MB`);
      } else if (loaded % (ROUND * 5) === 0) {
        log(`after ${fmtInt(loaded)} events (${fmtInt(transport.calls)} transport calls): heap ${mb(heapAfterGc())} MB`);
      }
    }
    last = heapAfterGc();
  } finally {
    await relay.stop();
  }
  const base = first ?? last;
  const growth = last - base;
  const ok = growth <= LIMIT_MB * 1024 * 1024;
  log(`after ${fmtInt(loaded)} events (${fmtInt(transport.calls)} transport calls): heap ${mb(last)} MB`);
  const text =
    `heap after ${fmtInt(firstAt)} events ${mb(base)} MB, after ${fmtInt(loaded)} ${mb(last)} MB: ` +
    `${growth >= 0 ? '+' : ''}${mb(growth)} MB (${(growth / Math.max(1, transport.calls)).toFixed(1)} bytes per transport call); ` +
    `${ok ? 'PASS' : 'FAIL'} (limit ${LIMIT_MB} MB); drained at ${fmtInt(perSec(loaded, drainMs))} events/s`;
  console.log(text);
  summary('relay-soak', text);
  if (!ok) process.exitCode = 1;
});
