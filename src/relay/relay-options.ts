import { hostname } from 'node:os';
import { ConfigError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { silentLogger } from '../core/logger.ts';
import type { RelayStore, Transport } from '../core/ports.ts';
import { leaseMarginMs, maxPublishTimeoutMs } from './lease-keeper.ts';
import { resolveRoutes, type ResolvedRoute, type RouteOptions } from './routes.ts';
import { resolveRetryOptions, type ResolvedRetryOptions, type RetryOptions } from '../core/retry.ts';
import { uuidv7 } from '../core/uuid.ts';
import { isMetrics, noopMetrics, type Metrics } from '../core/metrics.ts';

export interface RelayOptions {
  /** Where events are claimed and marked, e.g. `new PostgresRelayStore(...)`. Required. */
  readonly store: RelayStore;
  /** Where events are published, e.g. `new HttpTransport(...)`. Give this or `routes`. */
  readonly transport?: Transport;
  /**
   * A route table, to publish to several transports (e.g. HTTP and Kafka side by
   * side during a migration). An event is marked published once every route
   * that matches it acked; delivery state is kept per route, so a failing route
   * retries alone and the others do not re-send.
   */
  readonly routes?: readonly RouteOptions[];
  /** A name for this relay in leases, logs and status. Default: `<host>-<pid>-<random>`. */
  readonly relayId?: string;
  /** Events claimed per batch. Default: 500. */
  readonly batchSize?: number;
  /** Claim loops that run at once, each over its own share of buckets, overlapping database round trips with publishing. Default: 2. */
  readonly lanes?: number;
  /** How long a bucket lease lasts without renewal, judged by the database clock, in ms. Renewed every third of it. Default: 30000. */
  readonly leaseTtlMs?: number;
  /** Longest wait between claims when idle; LISTEN/NOTIFY wakes the relay sooner. Default: 1000 ms. */
  readonly pollIntervalMs?: number;
  /**
   * First wait after a claim comes back empty right after a busy one. While
   * the outbox stays empty the wait doubles up to `pollIntervalMs`, so a relay
   * that just published finds the next commits within milliseconds even
   * without NOTIFY, and an idle relay polls at `pollIntervalMs`. Default: 5 ms.
   */
  readonly minPollIntervalMs?: number;
  /** Backoff and attempts before an event is parked. */
  readonly retry?: RetryOptions;
  /**
   * The per-destination circuit breaker. When a transport says a destination
   * is down (HTTP 401, 403, 404, connection refused, DNS failure; a broker
   * refusing the credentials or the connection), the relay stops publishing
   * to that destination for a backoff, then sends one probe event; the first
   * success closes it. Events of a down destination stay pending, in order,
   * without counting attempts or parking; other destinations keep flowing.
   * Default: `{ baseDelayMs: 1000, maxDelayMs: 60000 }`.
   */
  readonly circuitBreaker?: CircuitBreakerOptions;
  /** Destinations whose parked events do not hold back later events of the same key. Default: none (a parked event holds its key). */
  readonly skipParkedDestinations?: readonly string[];
  /**
   * Longest time one publish call may take. A call with no outcome by then is the destination not
   * answering: `destination-down` (its circuit opens; no attempt is counted, nothing parks).
   * It must fit inside a lease: at most `leaseTtlMs - margin` (margin: a fifth of the TTL, at
   * most 2000 ms), 28000 ms with the default `leaseTtlMs`. Whatever it is, a call is aborted at
   * the lease's local deadline when renewals stop coming. Default: 30000 ms or that limit,
   * whichever is lower.
   */
  readonly publishTimeoutMs?: number;
  /** How long `stop()` lets in-flight batches finish before aborting them. Default: 10000 ms. */
  readonly stopTimeoutMs?: number;
  /**
   * Removes published rows older than `keepPublishedMs` in batches of
   * `batchSize` every `intervalMs`. `false` turns it off (use it with the
   * store's `deleteOnPublish`, or prune from a job). Default:
   * `{ keepPublishedMs: 86400000 (1 day), intervalMs: 60000, batchSize: 5000 }`.
   */
  readonly retention?: RetentionOptions | false;
  /** A pino-compatible logger. Default: silent. Each batch is logged at debug, a summary at info every `logSummaryIntervalMs`. */
  readonly logger?: Logger;
  /**
   * How often the relay logs its info summary (published since the last one,
   * rate, backlog, parked, leases held), in ms; 0 turns it off. The backlog
   * and parked counts cost one count of the outbox's open rows per summary.
   * Default: 60000 (one a minute).
   */
  readonly logSummaryIntervalMs?: number;
  /**
   * Where the relay's metrics go (src/core/metric-catalogue.ts):
   * `prometheusMetrics({ registry })` from `txbox/prometheus`, `otelMetrics({ meter })`,
   * or `false` for none. Default: OpenTelemetry through the global MeterProvider
   * when `@opentelemetry/api` is installed (a no-op without an SDK; register the
   * SDK before `start()`), else none.
   */
  readonly metrics?: Metrics | false;
  /**
   * How long the gauges read from the database (backlog, oldest pending age,
   * parked, relays alive: one statement) are reused, in ms. They are read only
   * when metrics are collected. Default: 5000.
   */
  readonly metricsCacheMs?: number;
}

export interface CircuitBreakerOptions {
  /** Pause after a destination is first seen down, before the first probe, in ms. Doubles (with jitter) after each failed probe. Default: 1000. */
  readonly baseDelayMs?: number;
  /** Longest pause between probes, in ms. Default: 60000 (1 minute). */
  readonly maxDelayMs?: number;
}

export interface ResolvedCircuitBreakerOptions {
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
}

export interface RetentionOptions {
  readonly keepPublishedMs?: number;
  readonly intervalMs?: number;
  readonly batchSize?: number;
}

export interface ResolvedRetentionOptions {
  readonly keepPublishedMs: number;
  readonly intervalMs: number;
  readonly batchSize: number;
}

export interface ResolvedRelayOptions {
  readonly store: RelayStore;
  readonly routes: readonly ResolvedRoute[];
  readonly relayId: string;
  readonly batchSize: number;
  readonly lanes: number;
  readonly leaseTtlMs: number;
  readonly pollIntervalMs: number;
  readonly minPollIntervalMs: number;
  readonly retry: ResolvedRetryOptions;
  readonly circuitBreaker: ResolvedCircuitBreakerOptions;
  readonly skipParkedDestinations: readonly string[];
  readonly publishTimeoutMs: number;
  readonly stopTimeoutMs: number;
  readonly retention: ResolvedRetentionOptions | false;
  readonly logger: Logger;
  readonly logSummaryIntervalMs: number;
  /** The metrics given; undefined: the default, resolved at `start()`. */
  readonly metrics: Metrics | undefined;
  readonly metricsCacheMs: number;
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}

/** A relay id for a relay started without one: `<host>-<pid>-<random>`. */
export function defaultRelayId(): string {
  return `${hostname()}-${process.pid}-${uuidv7().slice(-6)}`;
}

export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  if (!options?.store || typeof options.store.claim !== 'function') {
    throw new ConfigError('store', 'is required: pass a relay store such as new PostgresRelayStore({ connection })');
  }
  const routes = resolveRoutes(options.transport, options.routes);
  const relayId = options.relayId ?? defaultRelayId();
  if (typeof relayId !== 'string' || !/^[\w.:@-]{1,120}$/.test(relayId)) {
    throw new ConfigError('relayId', 'must be 1-120 characters of letters, digits and . _ : @ -');
  }
  const pollIntervalMs = int('pollIntervalMs', options.pollIntervalMs, 1000, 1, 600_000);
  const leaseTtlMs = int('leaseTtlMs', options.leaseTtlMs, 30_000, 500, 3_600_000);
  const skip = options.skipParkedDestinations ?? [];
  if (!Array.isArray(skip) || skip.some((d) => typeof d !== 'string')) {
    throw new ConfigError('skipParkedDestinations', 'must be an array of destination names');
  }
  return Object.freeze({
    store: options.store,
    routes: Object.freeze(routes),
    relayId,
    batchSize: int('batchSize', options.batchSize, 500, 1, 10_000),
    lanes: int('lanes', options.lanes, 2, 1, 64),
    leaseTtlMs,
    pollIntervalMs,
    minPollIntervalMs: Math.min(pollIntervalMs, int('minPollIntervalMs', options.minPollIntervalMs, 5, 1, 600_000)),
    retry: resolveRetryOptions(options.retry),
    circuitBreaker: resolveCircuitBreaker(options.circuitBreaker),
    skipParkedDestinations: Object.freeze([...skip]),
    publishTimeoutMs: publishTimeout(options.publishTimeoutMs, leaseTtlMs),
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 10_000, 0, 3_600_000),
    retention: resolveRetention(options.retention),
    logger: options.logger ?? silentLogger,
    logSummaryIntervalMs: int('logSummaryIntervalMs', options.logSummaryIntervalMs, 60_000, 0, 86_400_000),
    metrics: resolveMetrics(options.metrics),
    metricsCacheMs: int('metricsCacheMs', options.metricsCacheMs, 5000, 0, 3_600_000),
  });
}

function resolveMetrics(metrics: Metrics | false | undefined): Metrics | undefined {
  if (metrics === undefined) return undefined;
  if (metrics === false) return noopMetrics;
  if (!isMetrics(metrics)) {
    throw new ConfigError('metrics', 'must be metrics such as prometheusMetrics({ registry }) from txbox/prometheus or otelMetrics(), or false to turn metrics off');
  }
  return metrics;
}

function resolveCircuitBreaker(c: CircuitBreakerOptions | undefined): ResolvedCircuitBreakerOptions {
  if (c !== undefined && (c === null || typeof c !== 'object')) {
    throw new ConfigError('circuitBreaker', 'must be an object such as { baseDelayMs: 1000, maxDelayMs: 60000 }');
  }
  const baseDelayMs = int('circuitBreaker.baseDelayMs', c?.baseDelayMs, 1000, 1, 3_600_000);
  const maxDelayMs = int('circuitBreaker.maxDelayMs', c?.maxDelayMs, Math.max(60_000, baseDelayMs), 1, 86_400_000);
  if (maxDelayMs < baseDelayMs) throw new ConfigError('circuitBreaker.maxDelayMs', `must be >= circuitBreaker.baseDelayMs (${baseDelayMs})`);
  return Object.freeze({ baseDelayMs, maxDelayMs });
}

/** The publish timeout, checked to fit inside a lease (a send must not outlive the relay's right to send). */
function publishTimeout(value: number | undefined, leaseTtlMs: number): number {
  const max = maxPublishTimeoutMs(leaseTtlMs);
  const ms = int('publishTimeoutMs', value, Math.min(30_000, max), 1, 3_600_000);
  if (ms <= max) return ms;
  let ttl = leaseTtlMs;
  while (maxPublishTimeoutMs(ttl) < ms) ttl += 100;
  throw new ConfigError(
    'publishTimeoutMs',
    `${ms} ms does not fit inside the lease: with leaseTtlMs ${leaseTtlMs} a publish call may last at most ${max} ms ` +
      `(leaseTtlMs - ${leaseMarginMs(leaseTtlMs)} ms margin, so that a call started on a fresh lease can end before it). ` +
      `Set publishTimeoutMs to ${max} or less, or leaseTtlMs to ${ttl} or more`,
  );
}

function resolveRetention(r: RetentionOptions | false | undefined): ResolvedRetentionOptions | false {
  if (r === false) return false;
  if (r !== undefined && (r === null || typeof r !== 'object')) throw new ConfigError('retention', 'must be an object or false');
  return Object.freeze({
    keepPublishedMs: int('retention.keepPublishedMs', r?.keepPublishedMs, 86_400_000, 0, 2 ** 31 - 1),
    intervalMs: int('retention.intervalMs', r?.intervalMs, 60_000, 100, 86_400_000),
    batchSize: int('retention.batchSize', r?.batchSize, 5000, 1, 100_000),
  });
}
