/**
 * `txbox/redis`: the Redis Streams transport (one XADD per event, one stream
 * per destination, the XADD reply is the ack) and the reader of its entries
 * for consumers. Needs the `ioredis` peer dependency. See
 * docs/transports/redis.md.
 *
 * @example
 * import { RedisTransport } from 'txbox/redis';
 * const transport = new RedisTransport({ url: 'redis://127.0.0.1:6379', streams: { orders: 'shop:orders' } });
 */
export {
  RedisTransport,
  resolveRedisTransportOptions,
  type RedisTransportOptions,
  type ResolvedRedisConnection,
  type ResolvedRedisTransportOptions,
} from './redis-transport.ts';
export { encodeStreamFields, parseStreamEntry, type ParsedStreamEntry } from './redis-stream-fields.ts';
export {
  RedisConsumer,
  resolveRedisConsumerOptions,
  type ConsumerStream,
  type RedisConsumerEvents,
  type RedisConsumerOptions,
  type RedisConsumerStats,
  type RedisSettledStatus,
  type ResolvedRedisConsumerOptions,
} from './redis-consumer.ts';
