import type { MetricId, METRICS } from './metric-catalogue.ts';

/** Catalogue ids of counters and histograms: recorded by the relay and the inbox as things happen. */
export type RecordedMetricId = { [K in MetricId]: (typeof METRICS)[K]['kind'] extends 'gauge' ? never : K }[MetricId];
/** Catalogue ids of gauges: read when metrics are collected (a scrape, an export). */
export type GaugeMetricId = { [K in MetricId]: (typeof METRICS)[K]['kind'] extends 'gauge' ? K : never }[MetricId];

/** Adds to a counter, or observes a histogram value, for the label values it was made for. */
export interface MetricRecorder {
  record(value: number): void;
}

/**
 * Reports a gauge's values when metrics are collected: call `report` once per
 * label set (label values in the catalogue's label order). May be async: a
 * gauge read from the database resolves when the (cached) read is done.
 */
export type GaugeCallback = (report: (value: number, labelValues: readonly string[]) => void) => void | Promise<void>;

/**
 * The metrics port: what the relay and the inbox record, by the names of
 * `METRICS` (src/core/metric-catalogue.ts). Adapters: `otelMetrics()` (the
 * default when `@opentelemetry/api` is installed; a no-op without an SDK) and
 * `prometheusMetrics()` from `txbox/prometheus`.
 *
 * The hot path calls only `MetricRecorder.record`: callers ask for a recorder
 * once per label set and keep it, so recording allocates nothing.
 *
 * @example
 * const metrics = prometheusMetrics({ registry });
 * createRelay({ store, transport, metrics });
 */
export interface Metrics {
  /**
   * A recorder of the counter or histogram `id` for fixed `labelValues`, in
   * the catalogue's label order. Label values come from configuration
   * (destinations, transports, consumers, outcomes), never from keys or ids.
   */
  recorder(id: RecordedMetricId, labelValues: readonly string[]): MetricRecorder;
  /** Registers a callback that reports the gauge `id` at each collection. Returns a function that unregisters it. */
  observe(id: GaugeMetricId, callback: GaugeCallback): () => void;
}

const noopRecorder: MetricRecorder = { record() {} };

/** Records nothing: metrics off. */
export const noopMetrics: Metrics = Object.freeze({
  recorder: () => noopRecorder,
  observe: () => () => {},
});

/** True when `value` looks like a `Metrics` (for option checks). */
export function isMetrics(value: unknown): value is Metrics {
  const m = value as Partial<Metrics> | null;
  return typeof m === 'object' && m !== null && typeof m.recorder === 'function' && typeof m.observe === 'function';
}
