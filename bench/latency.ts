/**
 * Relay wake-up latency, LISTEN/NOTIFY vs polling: commit-to-publish time of
 * single-event transactions through a relay to a no-op transport (producer
 * and relay in this process, one clock). At a low rate the relay is idle
 * between events, so the figure is the wake-up; at 1,000 events/s it also
 * includes claim and mark of busy batches.
 *
 *   node --conditions=txbox-source --import tsx bench/latency.ts
 *
 * Settings: BENCH_LATENCY_SECONDS (10 per scenario), BENCH_HIGH_RATE (1000), BENCH_LOW_RATE (20),
 * BENCH_LATENCY_CLIENTS (8), BENCH_KEYS (1000).
 */
import { envInt, fmtInt, log, printTable, summary, withBench } from './lib.ts';
import { fmtMs, measureCommitToAck, type LatencyOptions } from './commit-to-ack.ts';

const SECONDS = envInt('BENCH_LATENCY_SECONDS', 10);
const HIGH = envInt('BENCH_HIGH_RATE', 1000);
const LOW = envInt('BENCH_LOW_RATE', 20);
const CLIENTS = envInt('BENCH_LATENCY_CLIENTS', 8);
const KEYS = envInt('BENCH_KEYS', 1000);

const scenarios: { name: string; options: Pick<LatencyOptions, 'rate' | 'notify' | 'pollIntervalMs'> }[] = [
  { name: `LISTEN/NOTIFY, ${LOW}/s`, options: { rate: LOW, notify: true, pollIntervalMs: 1000 } },
  { name: `polling 1000 ms (default), ${LOW}/s`, options: { rate: LOW, notify: false, pollIntervalMs: 1000 } },
  { name: `polling 100 ms, ${LOW}/s`, options: { rate: LOW, notify: false, pollIntervalMs: 100 } },
  { name: `LISTEN/NOTIFY, ${HIGH}/s`, options: { rate: HIGH, notify: true, pollIntervalMs: 1000 } },
  { name: `polling 1000 ms (default), ${HIGH}/s`, options: { rate: HIGH, notify: false, pollIntervalMs: 1000 } },
];

await withBench('latency', async (bench) => {
  log(`latency benchmark: ${SECONDS} s per scenario, ${CLIENTS} producer connections, relay defaults (batch 500, lanes 2), no-op transport, schema ${bench.schema}`);
  const rows: string[][] = [];
  for (const s of scenarios) {
    const r = await measureCommitToAck(bench, { ...s.options, seconds: SECONDS, clients: CLIENTS, keys: KEYS, transport: 'noop' });
    log(`${s.name}: ${fmtInt(r.acked)}/${fmtInt(r.produced)} acked, p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms, max ${fmtMs(r.max)} ms`);
    rows.push([s.name, fmtInt(r.achievedRate), `${fmtInt(r.acked)}/${fmtInt(r.produced)}`, fmtMs(r.p50), fmtMs(r.p90), fmtMs(r.p99), fmtMs(r.max), fmtMs(r.mean)]);
    summary('latency', `${s.name}: commit-to-publish p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms, max ${fmtMs(r.max)} ms`);
  }
  console.log('');
  printTable(['scenario', 'events/s', 'acked/produced', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'mean ms'], rows);
});
