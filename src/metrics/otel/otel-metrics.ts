import { createRequire } from 'node:module';
import type { Attributes, Meter, MeterProvider, ObservableGauge, ObservableResult } from '@opentelemetry/api';
import { METRICS, type MetricId, type MetricSpec } from '../../core/metric-catalogue.ts';
import { noopMetrics, type GaugeCallback, type GaugeMetricId, type MetricRecorder, type Metrics, type RecordedMetricId } from '../../core/metrics.ts';

export interface OtelMetricsOptions {
  /** The meter to create the instruments on. Default: `meterProvider.getMeter('txbox')`. */
  readonly meter?: Meter;
  /** Where to get the meter. Default: the global MeterProvider of `@opentelemetry/api` (a no-op until an SDK registers one). */
  readonly meterProvider?: MeterProvider;
}

type Api = typeof import('@opentelemetry/api');

/** The OpenTelemetry instrument name of a catalogue entry: counters without `_total` (Prometheus exporters add it back). */
export function otelInstrumentName(spec: MetricSpec): string {
  return spec.kind === 'counter' ? spec.name.replace(/_total$/, '') : spec.name;
}

function unitOf(spec: MetricSpec): string {
  return spec.name.endsWith('_seconds') ? 's' : '1';
}

/** The label values as OpenTelemetry attributes, in a frozen object made once per label set. */
function attributes(spec: MetricSpec, labelValues: readonly string[]): Attributes {
  if (labelValues.length !== spec.labels.length) {
    throw new TypeError(`metric ${spec.name} takes ${spec.labels.length} label values (${spec.labels.join(', ')}), got ${labelValues.length}`);
  }
  const attrs: Record<string, string> = {};
  spec.labels.forEach((label, i) => {
    attrs[label] = labelValues[i]!;
  });
  return Object.freeze(attrs);
}

/**
 * Metrics through OpenTelemetry: every catalogue entry becomes an instrument
 * on one meter (counters, histograms with the catalogue's bucket bounds as
 * advice, observable gauges read at collection). Without an SDK the API's
 * meter is a no-op and recording costs next to nothing.
 *
 * @example
 * import { metrics } from '@opentelemetry/api';
 * createRelay({ store, transport, metrics: otelMetrics({ meter: metrics.getMeter('txbox') }) });
 */
export function otelMetrics(options: OtelMetricsOptions = {}): Metrics {
  const meter = options.meter ?? (options.meterProvider ?? loadApi()?.metrics)?.getMeter('txbox');
  if (!meter) return noopMetrics;
  const recordFns = new Map<MetricId, (value: number, attrs: Attributes) => void>();
  const gauges = new Map<MetricId, ObservableGauge>();
  for (const [id, spec] of Object.entries(METRICS) as [MetricId, MetricSpec][]) {
    const opts = { description: spec.help, unit: unitOf(spec) };
    if (spec.kind === 'counter') {
      const counter = meter.createCounter(otelInstrumentName(spec), opts);
      recordFns.set(id, (v, a) => counter.add(v, a));
    } else if (spec.kind === 'histogram') {
      const histogram = meter.createHistogram(spec.name, { ...opts, advice: { explicitBucketBoundaries: [...(spec.buckets ?? [])] } });
      recordFns.set(id, (v, a) => histogram.record(v, a));
    } else {
      gauges.set(id, meter.createObservableGauge(spec.name, opts));
    }
  }
  const recorders = new Map<string, MetricRecorder>();
  return {
    recorder(id: RecordedMetricId, labelValues: readonly string[]): MetricRecorder {
      const cacheKey = `${id}\u0000${labelValues.join('\u0000')}`;
      let recorder = recorders.get(cacheKey);
      if (!recorder) {
        const fn = recordFns.get(id)!;
        const attrs = attributes(METRICS[id], labelValues);
        recorder = { record: (value) => fn(value, attrs) };
        recorders.set(cacheKey, recorder);
      }
      return recorder;
    },
    observe(id: GaugeMetricId, callback: GaugeCallback): () => void {
      const gauge = gauges.get(id)!;
      const spec = METRICS[id];
      const attrCache = new Map<string, Attributes>();
      const observer = async (result: ObservableResult): Promise<void> => {
        await callback((value, labelValues) => {
          const k = labelValues.join('\u0000');
          let attrs = attrCache.get(k);
          if (!attrs) attrCache.set(k, (attrs = attributes(spec, labelValues)));
          result.observe(value, attrs);
        });
      };
      gauge.addCallback(observer);
      return () => gauge.removeCallback(observer);
    },
  };
}

let api: Api | null | undefined;

/** `@opentelemetry/api` when installed (an optional peer), else null. Loaded once, synchronously. */
function loadApi(): Api | null {
  if (api === undefined) {
    try {
      api = createRequire(import.meta.url)('@opentelemetry/api') as Api;
    } catch {
      api = null;
    }
  }
  return api;
}

/**
 * The metrics a relay or an inbox uses when given none: OpenTelemetry
 * through the global MeterProvider when `@opentelemetry/api` is installed
 * (a no-op until an SDK registers a provider: register it before the relay
 * starts), else no-op.
 */
export function defaultMetrics(): Metrics {
  return loadApi() ? otelMetrics() : noopMetrics;
}
