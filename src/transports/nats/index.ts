/**
 * `txbox/nats`: the NATS JetStream transport. Each event is one JetStream
 * message with `Nats-Msg-Id` = event id (the stream's duplicate window drops
 * re-publishes), counted as sent once the stream acked it. Needs the peer
 * dependencies `@nats-io/transport-node` and `@nats-io/jetstream` (v3).
 * See docs/transports/nats.md.
 *
 * @example
 * import { NatsTransport } from 'txbox/nats';
 * const transport = new NatsTransport({
 *   servers: 'nats://127.0.0.1:4222',
 *   streams: { orders: 'ORDERS' }, // stream ORDERS captures txbox.orders
 * });
 */
export {
  NatsTransport,
  redactServer,
  resolveNatsTransportOptions,
  type NatsCredentialSetting,
  type NatsTransportEvents,
  type NatsTransportOptions,
  type NatsTransportTlsOptions,
  type ResolvedNatsTransportOptions,
} from './nats-transport.ts';
export { HEADER as NATS_HEADERS, parseNatsMessage, type ParsedNatsMessage, type ReceivedNatsMessage } from './nats-message.ts';
export { keyToken, MAX_KEY_TOKEN_LENGTH } from './nats-subjects.ts';
export {
  filterSubjectProblem,
  NatsConsumer,
  NatsConsumerEmitter,
  resolveNatsConsumerOptions,
  type NatsConsumerEvents,
  type NatsConsumerOptions,
  type NatsConsumerStats,
  type NatsSettledStatus,
  type ResolvedNatsConsumerOptions,
} from './nats-consumer.ts';
