/**
 * The broker transports of the benchmarks, built from a JSON-serializable
 * spec, so that a relay in a child process (bench/relay-worker.ts) publishes
 * through exactly the transport the parent set up. BENCH_RABBITMQ_CHANNELS
 * sets the RabbitMQ transport's `channels`.
 */
import type { Transport } from 'txbox';
import { HttpTransport } from 'txbox/http';
import type { RelayWorkerConfig } from './relay-process.ts';

export type BrokerSpec =
  | { readonly kind: 'kafka'; readonly topic: string }
  | { readonly kind: 'nats'; readonly subject: string; readonly stream: string }
  | { readonly kind: 'redis'; readonly prefix: string }
  | { readonly kind: 'rabbitmq'; readonly queue: string };

export const KAFKA_BROKERS = ['127.0.0.1:9092'];
export const NATS_SERVERS = '127.0.0.1:4222';
export const REDIS_URL = 'redis://127.0.0.1:6379';
export const RABBITMQ_URL = 'amqp://guest:guest@127.0.0.1:5672';

/** A new transport for destination `orders` on the broker of `spec`. */
export async function brokerTransport(spec: BrokerSpec): Promise<Transport> {
  switch (spec.kind) {
    case 'kafka': {
      const { KafkaTransport } = await import('txbox/kafka');
      return new KafkaTransport({ brokers: KAFKA_BROKERS, topics: { orders: spec.topic } });
    }
    case 'nats': {
      const { NatsTransport } = await import('txbox/nats');
      return new NatsTransport({ servers: NATS_SERVERS, subjects: { orders: spec.subject }, streams: { orders: spec.stream } });
    }
    case 'redis': {
      const { RedisTransport } = await import('txbox/redis');
      return new RedisTransport({ url: REDIS_URL, streamPrefix: spec.prefix });
    }
    case 'rabbitmq': {
      const { RabbitMqTransport } = await import('txbox/rabbitmq');
      // The default exchange routes by queue name.
      const channels = process.env.BENCH_RABBITMQ_CHANNELS ? { channels: Number(process.env.BENCH_RABBITMQ_CHANNELS) } : {};
      return new RabbitMqTransport({ url: RABBITMQ_URL, destinations: { orders: { exchange: '', routingKey: spec.queue } }, ...channels });
    }
  }
}

/**
 * The transport a drain's sink names, as the benchmark's own process builds it
 * (the ceilings of bench/peer-graphile-worker.ts): an unsigned HttpTransport to
 * the receiver, or the broker transport of the spec. No-op sinks have none.
 */
export async function sinkTransport(sink: RelayWorkerConfig['transport']): Promise<Transport> {
  if (sink.kind === 'http') return new HttpTransport({ endpoints: { orders: sink.url }, timeoutMs: 10_000, allowUnsigned: true });
  if (sink.kind === 'broker') return brokerTransport(sink.spec);
  throw new Error(`no transport for sink ${sink.kind}`);
}
