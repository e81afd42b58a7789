/**
 * txbox metrics through OpenTelemetry (`@opentelemetry/api`, an optional
 * peer). The relay and the inbox use the global MeterProvider by themselves
 * when the API is installed; import this to pass a meter of your own.
 */
export { otelMetrics, otelInstrumentName, type OtelMetricsOptions } from './otel-metrics.ts';
