/**
 * `txbox/rabbitmq`: the RabbitMQ transport (amqplib, publisher confirms,
 * `mandatory`, persistent messages, reconnects by itself), the consumer
 * that feeds an inbox (manual acks, prefetch, dead-letter exchange), and the
 * codec that rebuilds an event from a consumed message. Needs the optional peer
 * dependency `amqplib`. See docs/transports/rabbitmq.md.
 *
 * @example
 * import { RabbitMqConsumer, RabbitMqTransport } from 'txbox/rabbitmq';
 * const transport = new RabbitMqTransport({ url: 'amqp://relay:secret@127.0.0.1:5672/', exchange: 'events' });
 * const consumer = new RabbitMqConsumer({ url: 'amqp://billing:secret@127.0.0.1:5672/', queues: ['billing.orders'], inbox });
 */
export { RabbitMqTransport, type RabbitMqTransportEvents } from './rabbitmq-transport.ts';
export {
  RABBITMQ_MAX_MESSAGE_BYTES,
  resolveRabbitMqTransportOptions,
  type RabbitMqDestination,
  type RabbitMqExchangeType,
  type RabbitMqSocketOptions,
  type RabbitMqTransportOptions,
  type ResolvedRabbitMqDestination,
  type ResolvedRabbitMqTransportOptions,
} from './rabbitmq-transport-options.ts';
export {
  RABBITMQ_HEADERS,
  decodeRabbitMqMessage,
  encodeRabbitMqMessage,
  type DecodedRabbitMqMessage,
  type EncodedRabbitMqMessage,
} from './rabbitmq-message.ts';
export {
  RabbitMqConsumer,
  RabbitMqConsumerEmitter,
  type RabbitMqConsumerEvents,
  type RabbitMqConsumerStats,
  type RabbitMqSettledStatus,
} from './rabbitmq-consumer.ts';
export {
  resolveRabbitMqConsumerOptions,
  type RabbitMqConsumerOptions,
  type ResolvedRabbitMqConsumerOptions,
  type ResolvedRabbitMqConsumerQueue,
} from './rabbitmq-consumer-options.ts';
