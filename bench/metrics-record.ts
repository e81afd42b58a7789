/**
 * The CPU of one metric record, by exporter: `recorder(...).record(v)` of a
 * counter and of a histogram (the relay's hot-path call), through the
 * OpenTelemetry SDK (a MeterProvider with a reader) and prom-client, and the
 * no-op. The relay makes about five records per batch and destination
 * (src/relay/relay-metrics.ts: claim duration, batch size, one outcome
 * counter, publish duration and commit-to-ack per transport call), not per
 * event; multiply to get the cost per batch. No database. Figures, never assertions.
 *
 *   node --conditions=txbox-source --import tsx bench/metrics-record.ts
 *
 * Settings: BENCH_RECORDS (1000000), BENCH_ROUNDS (3).
 */
import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { noopMetrics, type Metrics } from 'txbox';
import { otelMetrics } from 'txbox/otel';
import { prometheusMetrics } from 'txbox/prometheus';
import { envInt, median, printTable, summary } from './lib.ts';

const RECORDS = envInt('BENCH_RECORDS', 1_000_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);

class PullReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const setups: [string, Metrics][] = [
  ['no-op', noopMetrics],
  ['OpenTelemetry SDK', otelMetrics({ meterProvider: new MeterProvider({ readers: [new PullReader()] }) })],
  ['prom-client', prometheusMetrics({ registry: new Registry() })],
];

function nsPerRecord(record: (v: number) => void): number {
  const t = performance.now();
  for (let i = 0; i < RECORDS; i++) record((i % 1000) / 1000);
  return ((performance.now() - t) * 1e6) / RECORDS;
}

const rows: string[][] = [];
for (const [name, m] of setups) {
  const counter = m.recorder('relayEvents', ['orders', 'http', 'published']);
  const histogram = m.recorder('relayCommitToAck', ['orders', 'http']);
  nsPerRecord((v) => counter.record(v)); // warm up
  nsPerRecord((v) => histogram.record(v));
  const c: number[] = [];
  const h: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    c.push(nsPerRecord((v) => counter.record(v)));
    h.push(nsPerRecord((v) => histogram.record(v)));
  }
  const perBatch = (4 * median(h) + median(c)) / 1000;
  rows.push([name, median(c).toFixed(0), median(h).toFixed(0), perBatch.toFixed(2)]);
  summary('metrics', `${name}: counter ${median(c).toFixed(0)} ns, histogram ${median(h).toFixed(0)} ns per record; about ${perBatch.toFixed(2)} µs per batch and destination`);
}
printTable(['exporter', 'counter ns/record', 'histogram ns/record', 'µs per batch and destination (4 histograms + 1 counter)'], rows);
