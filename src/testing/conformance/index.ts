/**
 * The conformance suites (`txbox/testing/conformance`). Apart from
 * `txbox/testing` because they register `node:test` suites, which
 * `RecordingTransport` and `checkDeliveries` users should not have to load.
 * The transport suite drives a real PostgreSQL outbox and needs the `pg`
 * peer when it runs (loaded then, not on import); the store suite needs
 * only the store under test, so this subpath loads without `pg`.
 */
export { runTransportConformance, type ConformanceBroker, type ConformanceOptions } from './transport-conformance.ts';
export {
  runStoreConformance,
  type StoreConformanceOptions,
  type StoreConformanceNamespace,
  type ConformanceOutboxRow,
  type ConformanceProjectionResult,
  type OpenTransaction,
} from './store-conformance.ts';
