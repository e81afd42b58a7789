/**
 * `txbox/sqs`: the Amazon SQS transport (SendMessageBatch to FIFO and
 * standard queues), the SNS transport (PublishBatch to FIFO and standard
 * topics) and the reader of their messages for consumers. Needs the
 * `@aws-sdk/client-sqs` peer dependency, and `@aws-sdk/client-sns` for
 * SnsTransport (loaded when it starts). See docs/transports/sqs.md.
 *
 * @example
 * import { SqsTransport } from 'txbox/sqs';
 * const transport = new SqsTransport({ queues: { orders: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo' }, region: 'eu-west-1' });
 */
export { SqsTransport, resolveSqsTransportOptions, type AwsClientOptions, type ResolvedSqsTransportOptions, type SqsTransportOptions } from './sqs-transport.ts';
export { SnsTransport, resolveSnsTransportOptions, type ResolvedSnsTransportOptions, type SnsTransportOptions } from './sns-transport.ts';
export { decodeSqsMessage, encodeSqsMessage, messageGroupId, SQS_ATTRIBUTES, type DecodedSqsMessage, type EncodedSqsMessage, type SqsMessageLike } from './sqs-message.ts';
export { classifyEntryError, classifyRequestError, type AwsFailure } from './sqs-outcomes.ts';
export {
  SqsConsumer,
  SqsConsumerEmitter,
  resolveSqsConsumerOptions,
  type ResolvedSqsConsumerOptions,
  type SqsConsumerEvents,
  type SqsConsumerOptions,
  type SqsConsumerStats,
} from './sqs-consumer.ts';
