/**
 * Every metric txbox exports, by its Prometheus name. One list, read by both
 * exporters (OpenTelemetry through `@opentelemetry/api`, and `txbox/prometheus`
 * on prom-client), by the alert rules and the Grafana dashboard in `ops/` (a
 * test checks their expressions against it) and by docs/operations.md.
 *
 * Labels are bounded: destinations, transports, consumers and outcomes come
 * from configuration, never from event keys or ids.
 *
 * Names follow Prometheus conventions: counters end in `_total`, durations are
 * in seconds and end in `_seconds`. Through OpenTelemetry the instrument name
 * is the same without `_total` (the Prometheus exporter adds it back), with the
 * unit `s` for `_seconds` metrics.
 */
export type MetricKind = 'counter' | 'histogram' | 'gauge';

export interface MetricSpec {
  readonly name: string;
  readonly kind: MetricKind;
  readonly help: string;
  readonly labels: readonly string[];
  /** Histogram bucket bounds (seconds, or counts for batch sizes). */
  readonly buckets?: readonly number[];
}

/** Seconds, from 0.5 ms to 60 s: publish calls, claims, handlers. */
export const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const;
/** Seconds, from 1 ms to 1 h: commit-to-ack and end-to-end lag, which include outages. */
export const LAG_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600] as const;
/** Events per claimed batch. */
export const BATCH_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000] as const;

export const RELAY_EVENT_OUTCOMES = ['published', 'retried', 'parked', 'fenced'] as const;
export const INBOX_EVENT_OUTCOMES = ['processed', 'duplicate', 'held', 'dead', 'failed'] as const;

export const METRICS = {
  relayEvents: {
    name: 'txbox_relay_events_total',
    kind: 'counter',
    help: 'Events the relay finished a publish attempt for, by outcome: published (acked and marked), retried (failed, backing off), parked (out of attempts or refused for good), fenced (the mark was refused: the lease had moved; published again by the new owner).',
    labels: ['destination', 'transport', 'outcome'],
  },
  relayPublishDuration: {
    name: 'txbox_relay_publish_duration_seconds',
    kind: 'histogram',
    help: 'Time from the start of an event\'s send to its ack (or failure).',
    labels: ['destination', 'transport'],
    buckets: DURATION_BUCKETS,
  },
  relayCommitToAck: {
    name: 'txbox_relay_commit_to_ack_seconds',
    kind: 'histogram',
    help: 'Time from the event\'s row being written (created_at) to the broker\'s ack.',
    labels: ['destination', 'transport'],
    buckets: LAG_BUCKETS,
  },
  relayBatchSize: {
    name: 'txbox_relay_batch_size',
    kind: 'histogram',
    help: 'Events per claimed batch.',
    labels: ['transport'],
    buckets: BATCH_BUCKETS,
  },
  relayClaimDuration: {
    name: 'txbox_relay_claim_duration_seconds',
    kind: 'histogram',
    help: 'Time one claim statement took.',
    labels: ['transport'],
    buckets: DURATION_BUCKETS,
  },
  relayBacklog: {
    name: 'txbox_relay_backlog',
    kind: 'gauge',
    help: 'Pending events per destination (read from the database, cached).',
    labels: ['destination'],
  },
  relayOldestPendingAge: {
    name: 'txbox_relay_oldest_pending_age_seconds',
    kind: 'gauge',
    help: 'Age of the oldest pending event per destination (read from the database, cached); 0 with none pending.',
    labels: ['destination'],
  },
  relayParked: {
    name: 'txbox_relay_parked',
    kind: 'gauge',
    help: 'Parked events per destination (read from the database, cached).',
    labels: ['destination'],
  },
  relayLeasesHeld: {
    name: 'txbox_relay_leases_held',
    kind: 'gauge',
    help: 'Buckets this relay holds a lease on.',
    labels: [],
  },
  relayRelaysAlive: {
    name: 'txbox_relay_relays_alive',
    kind: 'gauge',
    help: 'Relays whose heartbeat is current (read from the database, cached).',
    labels: [],
  },
  relayCircuitOpen: {
    name: 'txbox_relay_circuit_open',
    kind: 'gauge',
    help: '1 while this relay holds the destination\'s circuit open (the destination answered as down), else 0.',
    labels: ['destination', 'transport'],
  },
  relayWalSlotLag: {
    name: 'txbox_relay_wal_slot_lag_bytes',
    kind: 'gauge',
    help: 'WAL wake mode: bytes of WAL this relay\'s replication slot retains past what the relay confirmed (pg_current_wal_lsn() - confirmed_flush_lsn; PostgresRelayStore.wakeStatus()). Absent in the notify mode.',
    labels: [],
  },
  relayWalSlotConfirmedAge: {
    name: 'txbox_relay_wal_slot_confirmed_age_seconds',
    kind: 'gauge',
    help: 'WAL wake mode: seconds since this relay last confirmed its replication stream to the server (now() - pg_stat_replication.reply_time): the age of the slot\'s lag. A reading relay confirms every 100 ms; it grows while the relay stops reading. Absent in the notify mode.',
    labels: [],
  },
  inboxEvents: {
    name: 'txbox_inbox_events_total',
    kind: 'counter',
    help: 'Events the inbox finished with, by outcome: processed (handler committed), duplicate (already processed: skipped), held (waits for an earlier version), dead (out of attempts, or can never be stored), failed (handler failed, will retry).',
    labels: ['consumer', 'outcome'],
  },
  inboxHandlerDuration: {
    name: 'txbox_inbox_handler_duration_seconds',
    kind: 'histogram',
    help: 'Time the handler and its transaction took, to commit.',
    labels: ['consumer'],
    buckets: DURATION_BUCKETS,
  },
  inboxLag: {
    name: 'txbox_inbox_lag_seconds',
    kind: 'histogram',
    help: 'End-to-end lag: from the event\'s occurredAt to its handler\'s commit.',
    labels: ['consumer'],
    buckets: LAG_BUCKETS,
  },
} as const satisfies Record<string, MetricSpec>;

export type MetricId = keyof typeof METRICS;
