/**
 * txbox metrics on prom-client (an optional peer), for users without
 * OpenTelemetry. Serve the registry with `serveHealth` from `txbox/health`.
 */
export { prometheusMetrics, type PrometheusMetricsOptions } from './prometheus-metrics.ts';
