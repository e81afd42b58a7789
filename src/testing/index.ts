/** Test helpers for users and for txbox's own suites. */
export { RecordingTransport, type RecordingTransportOptions, type FailureRule } from './recording-transport.ts';
export { checkDeliveries, type DeliveryReport, type Delivered } from './order-check.ts';
export { runTransportConformance, type ConformanceBroker, type ConformanceOptions } from './transport-conformance.ts';
