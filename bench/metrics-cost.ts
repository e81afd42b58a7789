/**
 * What metrics cost the relay, measured in one run with and without:
 *  1. drain rate of a backlog to a no-op transport (relay in a child process):
 *     metrics off (`metrics: false`), the default without an SDK (the
 *     OpenTelemetry API's no-op meter), the OpenTelemetry SDK, prom-client;
 *  2. commit-to-publish p50/p99 at BENCH_RATE (1,000) events/s, LISTEN/NOTIFY,
 *     relay in this process, with the same four set-ups;
 *  3. the database read behind the gauges (`outboxGauges()`: backlog, oldest
 *     pending age, parked per destination, relays alive) on the backlog.
 * The set-ups alternate within each repeat, in a rotating order; with the
 * SDK and prom-client the metrics are collected every BENCH_SCRAPE_MS (1000),
 * so the gauges' query runs too. Figures, never assertions.
 *
 *   node --conditions=txbox-source --import tsx bench/metrics-cost.ts
 *
 * Settings: BENCH_EVENTS (100000), BENCH_KEYS (1000), BENCH_REPEAT (3),
 * BENCH_LATENCY_SECONDS (10), BENCH_RATE (1000), BENCH_SCRAPE_MS (1000),
 * BENCH_GAUGE_RUNS (20), BENCH_SKIP_LATENCY=1, BENCH_SKIP_DRAIN=1.
 */
import { PostgresRelayStore } from 'txbox/postgres';
import { Backlog, envInt, fmtInt, log, mb, median, percentile, perSec, printTable, summary, withBench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';
import { fmtMs, measureCommitToAck } from './commit-to-ack.ts';
import { METRICS_KINDS, metricsSetup, type MetricsKind } from './metrics-setups.ts';

const EVENTS = envInt('BENCH_EVENTS', 100_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const REPEAT = envInt('BENCH_REPEAT', 3);
const SECONDS = envInt('BENCH_LATENCY_SECONDS', 10);
const RATE = envInt('BENCH_RATE', 1000);
const GAUGE_RUNS = envInt('BENCH_GAUGE_RUNS', 20);

const LABEL: Record<MetricsKind, string> = {
  off: 'off (metrics: false)',
  default: 'default, no SDK (OTel API no-op)',
  otel: 'OpenTelemetry SDK',
  prometheus: 'prom-client',
};

/** The set-ups in a different order each repeat, so that none always runs first. */
function rotated(rep: number): MetricsKind[] {
  return METRICS_KINDS.map((_, i) => METRICS_KINDS[(i + rep) % METRICS_KINDS.length]!);
}

await withBench('metrics', async (bench) => {
  log(`metrics cost: ${fmtInt(EVENTS)} events, ${KEYS} keys, ${REPEAT} repeat(s), latency ${SECONDS} s at ${RATE}/s per set-up, schema ${bench.schema}`);
  const backlog = await Backlog.create(bench, EVENTS, KEYS);

  // 3. The gauges' read, on the full backlog (every row pending).
  await backlog.restore();
  const store = new PostgresRelayStore({ schema: bench.schema, connection: bench.connection });
  const timeIt = async (fn: () => Promise<unknown>): Promise<{ p50: number; p99: number }> => {
    await fn();
    const ms: number[] = [];
    for (let i = 0; i < GAUGE_RUNS; i++) {
      const t = performance.now();
      await fn();
      ms.push(performance.now() - t);
    }
    ms.sort((a, b) => a - b);
    return { p50: median(ms), p99: percentile(ms, 99) };
  };
  const gauges = await timeIt(() => store.outboxGauges());
  const counts = await timeIt(() => store.backlog());
  const parked = Math.floor(EVENTS / 100);
  await bench.sql(`UPDATE ${bench.names.outbox} SET state = 'parked' WHERE seq IN (SELECT seq FROM ${bench.names.outbox} ORDER BY seq DESC LIMIT $1)`, [parked]);
  const gaugesParked = await timeIt(() => store.outboxGauges());
  console.log('');
  printTable(
    ['query', 'rows', 'p50 ms', 'p99 ms'],
    [
      ['outboxGauges() (metrics gauges)', `${fmtInt(EVENTS)} pending`, gauges.p50.toFixed(1), gauges.p99.toFixed(1)],
      ['backlog() (log summary, for comparison)', `${fmtInt(EVENTS)} pending`, counts.p50.toFixed(1), counts.p99.toFixed(1)],
      ['outboxGauges() (metrics gauges)', `${fmtInt(EVENTS - parked)} pending, ${fmtInt(parked)} parked`, gaugesParked.p50.toFixed(1), gaugesParked.p99.toFixed(1)],
    ],
  );
  summary('metrics', `gauges read (outboxGauges) on ${fmtInt(EVENTS)} pending rows: p50 ${gauges.p50.toFixed(1)} ms, p99 ${gauges.p99.toFixed(1)} ms (cached 5 s by default, read only when collected)`);

  // 1. Drain.
  const drains = new Map<MetricsKind, number[]>(METRICS_KINDS.map((k) => [k, []]));
  const rss = new Map<MetricsKind, number[]>(METRICS_KINDS.map((k) => [k, []]));
  /** Relay process CPU per event, µs: less sensitive than the rate to other load on the machine. */
  const cpu = new Map<MetricsKind, number[]>(METRICS_KINDS.map((k) => [k, []]));
  if (process.env.BENCH_SKIP_DRAIN !== '1') {
    for (let rep = 0; rep < REPEAT; rep++) {
      log(`--- drain repeat ${rep + 1}/${REPEAT}`);
      for (const kind of rotated(rep)) {
        await backlog.restore();
        const r = await startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, expect: EVENTS, transport: { kind: 'noop' }, metrics: kind }).result;
        const rate = perSec(r.published, r.ms);
        drains.get(kind)!.push(rate);
        rss.get(kind)!.push(r.rssMax);
        const us = ((r.cpuMs ?? Number.NaN) * 1000) / Math.max(1, r.published);
        cpu.get(kind)!.push(us);
        log(`drain, metrics ${LABEL[kind]}: ${fmtInt(r.published)} in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(rate)} events/s, relay CPU ${us.toFixed(1)} µs/event, max RSS ${mb(r.rssMax)} MB${r.errors.length ? `; errors ${r.errors.join(' | ')}` : ''}`);
      }
    }
  }

  // 2. Latency at RATE events/s.
  const lat = new Map<MetricsKind, { p50: number; p99: number }[]>(METRICS_KINDS.map((k) => [k, []]));
  if (process.env.BENCH_SKIP_LATENCY !== '1') {
    for (let rep = 0; rep < REPEAT; rep++) {
      log(`--- latency repeat ${rep + 1}/${REPEAT}`);
      for (const kind of rotated(rep)) {
        const setup = metricsSetup(kind);
        const r = await measureCommitToAck(bench, {
          rate: RATE,
          seconds: SECONDS,
          clients: 8,
          keys: KEYS,
          notify: true,
          pollIntervalMs: 1000,
          transport: 'noop',
          ...(setup.metrics === undefined ? {} : { metrics: setup.metrics }),
        });
        await setup.stop();
        lat.get(kind)!.push({ p50: r.p50, p99: r.p99 });
        log(`latency ${RATE}/s, metrics ${LABEL[kind]}: ${fmtInt(r.acked)}/${fmtInt(r.produced)} acked, p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms (${setup.collections()} collections)`);
      }
    }
  }

  console.log('');
  const offDrain = median(drains.get('off')!);
  const offCpu = median(cpu.get('off')!);
  const offP50 = median(lat.get('off')!.map((x) => x.p50));
  printTable(
    ['metrics', 'drain ev/s (median)', 'drain vs off', 'drain runs', 'relay CPU µs/event (median)', 'CPU vs off', 'max RSS MB', `p50 ms at ${RATE}/s (median)`, 'p50 vs off ms', `p99 ms (median)`],
    METRICS_KINDS.map((kind) => {
      const d = drains.get(kind)!;
      const l = lat.get(kind)!;
      const p50 = median(l.map((x) => x.p50));
      return [
        LABEL[kind],
        d.length ? fmtInt(median(d)) : '-',
        d.length ? `${(((median(d) - offDrain) / offDrain) * 100).toFixed(1)}%` : '-',
        d.map((x) => fmtInt(x)).join(' / '),
        d.length ? median(cpu.get(kind)!).toFixed(1) : '-',
        d.length ? `${(((median(cpu.get(kind)!) - offCpu) / offCpu) * 100).toFixed(1)}%` : '-',
        rss.get(kind)!.length ? mb(Math.max(...rss.get(kind)!)) : '-',
        l.length ? fmtMs(p50) : '-',
        l.length ? (p50 - offP50).toFixed(2) : '-',
        l.length ? fmtMs(median(l.map((x) => x.p99))) : '-',
      ];
    }),
  );
  for (const kind of METRICS_KINDS) {
    if (kind === 'off') continue;
    const d = drains.get(kind)!;
    const l = lat.get(kind)!;
    summary(
      'metrics',
      `${LABEL[kind]}: drain ${d.length ? `${(((median(d) - offDrain) / offDrain) * 100).toFixed(1)}% vs off` : '-'} (target >= -3%), ` +
        `relay CPU per event ${d.length ? `${(((median(cpu.get(kind)!) - offCpu) / offCpu) * 100).toFixed(1)}% vs off` : '-'}; ` +
        `p50 at ${RATE}/s ${l.length ? `${(median(l.map((x) => x.p50)) - offP50).toFixed(2)} ms vs off` : '-'} (target <= +0.2 ms)`,
    );
  }
});
