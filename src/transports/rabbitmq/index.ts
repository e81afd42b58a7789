/**
 * `txbox/rabbitmq`: the RabbitMQ transport (amqplib, publisher confirms,
 * `mandatory`, persistent messages, reconnects by itself) and the codec
 * that rebuilds an event from a consumed message. Needs the optional peer
 * dependency `amqplib`. See docs/transports/rabbitmq.md.
 *
 * @example
 * import { RabbitMqTransport } from 'txbox/rabbitmq';
 * const transport = new RabbitMqTransport({ url: 'amqp://relay:secret@127.0.0.1:5672/', exchange: 'events' });
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
