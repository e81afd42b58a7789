/**
 * txbox core: event definitions, the outbox write, the relay, ports and
 * errors. No I/O and no runtime dependency: stores and transports live in
 * subpath exports (`txbox/postgres`, `txbox/pglite`, `txbox/http`, ...).
 */
export * from './core/errors.ts';
export * from './core/envelope.ts';
export * from './core/events.ts';
export * from './core/ports.ts';
export * from './core/outbox.ts';
export * from './core/retry.ts';
export * from './core/executors.ts';
export * from './core/unit-of-work.ts';
export { brokerOutage, startDespiteOutage, type OutageContext } from './core/broker-outage.ts';
export type { Logger } from './core/logger.ts';
export { silentLogger } from './core/logger.ts';
export type { StandardSchemaV1 } from './core/standard-schema.ts';
export { uuidv7, isUuid } from './core/uuid.ts';
export { keyHash } from './core/emitter.ts';
export type { HealthCheck, HealthReport, HealthSource } from './core/health.ts';
export { METRICS, type MetricSpec, type MetricKind, type MetricId } from './core/metric-catalogue.ts';
export { noopMetrics, type Metrics, type MetricRecorder, type GaugeCallback, type RecordedMetricId, type GaugeMetricId } from './core/metrics.ts';
export { Relay, createRelay, type RelayEvents } from './relay/relay.ts';
export type { RelayOptions, ResolvedRelayOptions, RetentionOptions } from './relay/relay-options.ts';
export type { RouteOptions } from './relay/routes.ts';
export * from './inbox/index.ts';
export type { InboxOutcome, InboxStore, InboxProcessor, Consumer } from './core/inbox-ports.ts';
