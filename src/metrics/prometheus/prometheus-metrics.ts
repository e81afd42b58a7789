import { Counter, Gauge, Histogram, register as globalRegistry, type Registry } from 'prom-client';
import { METRICS, type MetricId, type MetricSpec } from '../../core/metric-catalogue.ts';
import type { GaugeCallback, GaugeMetricId, MetricRecorder, Metrics, RecordedMetricId } from '../../core/metrics.ts';

export interface PrometheusMetricsOptions {
  /** The prom-client registry the metrics are registered on. Default: prom-client's global `register`. */
  readonly registry?: Registry;
}

interface Incrementable {
  inc(value: number): void;
}
interface Observable {
  observe(value: number): void;
}

/** One txbox metric set per registry: a relay and an inbox of one process share it (prom-client refuses a name twice). */
const byRegistry = new WeakMap<Registry, Metrics>();

/**
 * Metrics on prom-client, for users without OpenTelemetry: every catalogue
 * entry is registered on `registry` under its catalogue name, labels and
 * buckets. Gauges read from the database are read when the registry is
 * scraped (`registry.metrics()`), through a cache.
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { prometheusMetrics } from 'txbox/prometheus';
 * const registry = new Registry();
 * const relay = createRelay({ store, transport, metrics: prometheusMetrics({ registry }) });
 * serveHealth({ port: 9464, sources: [relay], metrics: registry });
 */
export function prometheusMetrics(options: PrometheusMetricsOptions = {}): Metrics {
  const registry = options.registry ?? globalRegistry;
  let metrics = byRegistry.get(registry);
  if (!metrics) {
    metrics = create(registry);
    byRegistry.set(registry, metrics);
  }
  return metrics;
}

function create(registry: Registry): Metrics {
  const recordables = new Map<MetricId, Counter | Histogram>();
  const callbacks = new Map<MetricId, Set<GaugeCallback>>();
  for (const [id, spec] of Object.entries(METRICS) as [MetricId, MetricSpec][]) {
    const base = { name: spec.name, help: spec.help, labelNames: [...spec.labels], registers: [registry] };
    if (spec.kind === 'counter') recordables.set(id, new Counter(base));
    else if (spec.kind === 'histogram') recordables.set(id, new Histogram({ ...base, buckets: [...(spec.buckets ?? [])] }));
    else {
      const set = new Set<GaugeCallback>();
      callbacks.set(id, set);
      new Gauge({
        ...base,
        async collect() {
          this.reset();
          await Promise.all(
            [...set].map((cb) =>
              cb((value, labelValues) => {
                if (labelValues.length === 0) this.set(value);
                else this.labels(...labelValues).set(value);
              }),
            ),
          );
        },
      });
    }
  }
  const recorders = new Map<string, MetricRecorder>();
  return {
    recorder(id: RecordedMetricId, labelValues: readonly string[]): MetricRecorder {
      const cacheKey = `${id}\u0000${labelValues.join('\u0000')}`;
      let recorder = recorders.get(cacheKey);
      if (!recorder) {
        const spec = METRICS[id];
        if (labelValues.length !== spec.labels.length) {
          throw new TypeError(`metric ${spec.name} takes ${spec.labels.length} label values (${spec.labels.join(', ')}), got ${labelValues.length}`);
        }
        const metric = recordables.get(id)!;
        const child = metric.labels(...labelValues) as unknown as Incrementable & Observable;
        recorder = spec.kind === 'counter' ? { record: (v) => child.inc(v) } : { record: (v) => child.observe(v) };
        recorders.set(cacheKey, recorder);
      }
      return recorder;
    },
    observe(id: GaugeMetricId, callback: GaugeCallback): () => void {
      const set = callbacks.get(id)!;
      set.add(callback);
      return () => set.delete(callback);
    },
  };
}
