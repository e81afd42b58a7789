/**
 * `txbox/kafka`: the Kafka transport (kafkajs idempotent producer, acks=all,
 * the event key as the message key) and the reader of its messages for the
 * consuming side. Needs the optional peer dependency `kafkajs` (2.2). See
 * docs/transports/kafka.md.
 *
 * @example
 * import { KafkaTransport } from 'txbox/kafka';
 * const transport = new KafkaTransport({ brokers: ['127.0.0.1:9092'], topicPrefix: 'shop.' });
 */
export {
  KafkaTransport,
  resolveKafkaTransportOptions,
  topicOf,
  type KafkaTransportOptions,
  type ResolvedKafkaConnection,
  type ResolvedKafkaTransportOptions,
} from './kafka-transport.ts';
export type { KafkaCompression } from './kafka-client.ts';
export { KAFKA_HEADER, parseKafkaMessage, type KafkaMessageLike, type ParsedKafkaMessage } from './kafka-message.ts';
export {
  KafkaConsumer,
  KafkaConsumerEmitter,
  resolveKafkaConsumerOptions,
  type KafkaConsumerEvents,
  type KafkaConsumerOptions,
  type KafkaConsumerStats,
  type KafkaSettledStatus,
  type ResolvedKafkaConsumerOptions,
} from './kafka-consumer.ts';
