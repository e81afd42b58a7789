/**
 * `txbox/pubsub`: the Google Cloud Pub/Sub transport (ordering key = event
 * key, envelope in attributes, batched and flow-controlled publishes), the
 * consumer that feeds an inbox (StreamingPull, ack after commit, lease
 * extension, dead-letter topic, exactly-once delivery where the subscription
 * has it) and the codec between events and messages. Needs the optional
 * peer dependency `@google-cloud/pubsub`. See docs/transports/pubsub.md.
 *
 * @example
 * import { PubSubConsumer, PubSubTransport } from 'txbox/pubsub';
 * const transport = new PubSubTransport({ projectId: 'shop', topics: { orders: 'shop-orders' } });
 * const consumer = new PubSubConsumer({ projectId: 'shop', subscription: 'billing-orders', destination: 'orders', inbox });
 */
export { PubSubTransport } from './pubsub-transport.ts';
export {
  resolvePubSubTransportOptions,
  type PubSubConnectionOptions,
  type PubSubTransportOptions,
  type ResolvedPubSubConnection,
  type ResolvedPubSubTransportOptions,
} from './pubsub-transport-options.ts';
export { PUBSUB_ATTRIBUTE, PUBSUB_LIMITS, buildPubSubMessage, parsePubSubMessage, type BuiltPubSubMessage, type EncodedPubSubMessage, type ParsedPubSubMessage, type PubSubMessageLike } from './pubsub-message.ts';
export { PubSubConsumer, PubSubConsumerEmitter, type PubSubConsumerEvents, type PubSubConsumerStats, type PubSubSubscriptionInfo } from './pubsub-consumer.ts';
export { resolvePubSubConsumerOptions, type PubSubConsumerOptions, type ResolvedPubSubConsumerOptions } from './pubsub-consumer-options.ts';
