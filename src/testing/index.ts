/**
 * Test helpers for users and for txbox's own suites. No peer dependency: this
 * subpath loads with txbox alone. The transport conformance suite, which needs
 * `pg`, is `txbox/testing/conformance`.
 */
export { RecordingTransport, type RecordingTransportOptions, type FailureRule } from './recording-transport.ts';
export { checkDeliveries, type DeliveryReport, type Delivered } from './order-check.ts';
