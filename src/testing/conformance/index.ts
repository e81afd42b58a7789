/**
 * The transport conformance suite (`txbox/testing/conformance`). Apart from
 * `txbox/testing` because it drives a real PostgreSQL outbox: it needs the
 * `pg` peer and registers `node:test` suites, which `RecordingTransport` and
 * `checkDeliveries` users should not have to install or load.
 */
export { runTransportConformance, type ConformanceBroker, type ConformanceOptions } from './transport-conformance.ts';
