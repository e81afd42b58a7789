/**
 * The metrics set-ups bench/metrics-cost.ts compares: off (`metrics: false`),
 * the default without an SDK (OpenTelemetry API, no-op meter), the
 * OpenTelemetry SDK (a MeterProvider whose reader collects every
 * BENCH_SCRAPE_MS, as an exporter would), and prom-client (a registry
 * scraped every BENCH_SCRAPE_MS). Collections include the database gauges.
 */
import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import type { Metrics } from 'txbox';
import { otelMetrics } from 'txbox/otel';
import { prometheusMetrics } from 'txbox/prometheus';
import { envInt } from './lib.ts';

export type MetricsKind = 'off' | 'default' | 'otel' | 'prometheus';
export const METRICS_KINDS: readonly MetricsKind[] = ['off', 'default', 'otel', 'prometheus'];

const SCRAPE_MS = envInt('BENCH_SCRAPE_MS', 1000);

class PullReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

export interface MetricsSetup {
  /** For the relay's `metrics` option; undefined: the default. */
  readonly metrics: Metrics | false | undefined;
  /** Collections done (scrapes or SDK collects). */
  collections(): number;
  stop(): Promise<void>;
}

export function metricsSetup(kind: MetricsKind): MetricsSetup {
  let collections = 0;
  if (kind === 'off' || kind === 'default') {
    return { metrics: kind === 'off' ? false : undefined, collections: () => 0, stop: async () => {} };
  }
  let collect: () => Promise<unknown>;
  let metrics: Metrics;
  let shutdown = async (): Promise<void> => {};
  if (kind === 'otel') {
    const reader = new PullReader();
    const provider = new MeterProvider({ readers: [reader] });
    metrics = otelMetrics({ meterProvider: provider });
    collect = () => reader.collect();
    shutdown = () => provider.shutdown();
  } else {
    const registry = new Registry();
    metrics = prometheusMetrics({ registry });
    collect = () => registry.metrics();
  }
  const timer = setInterval(() => {
    collect().then(() => collections++, () => {});
  }, SCRAPE_MS);
  return {
    metrics,
    collections: () => collections,
    stop: async () => {
      clearInterval(timer);
      await shutdown();
    },
  };
}
