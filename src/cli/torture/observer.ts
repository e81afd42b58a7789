/**
 * The independent observer behind the transport: the demo's receiving sides,
 * which read what actually arrived (HTTP: a receiver in this process that
 * verifies every signature; brokers: a reader of the topic, stream, subject
 * or exchange of this run).
 */
import type { DemoSink } from '../demo/demo-sink.ts';
import type { TortureTransport } from './torture-options.ts';

export async function createObserver(transport: TortureTransport, url: string | undefined): Promise<DemoSink> {
  switch (transport) {
    case 'http':
      return new (await import('../demo/http-sink.ts')).HttpDemoSink();
    case 'kafka':
      return new (await import('../demo/kafka-sink.ts')).KafkaDemoSink(url ? { brokers: url } : {});
    case 'nats':
      return new (await import('../demo/nats-sink.ts')).NatsDemoSink(url ? { servers: url } : {});
    case 'rabbitmq':
      return new (await import('../demo/rabbitmq-sink.ts')).RabbitMqDemoSink(url);
    case 'redis':
      return new (await import('../demo/redis-sink.ts')).RedisDemoSink(url ?? 'redis://127.0.0.1:6379');
  }
}

/** Signature failures and unreadable requests the observer counted (HTTP only; brokers: 0). */
export function observerRejections(sink: DemoSink): { signatureFailures: number; unreadable: number } {
  const counts = sink as Partial<{ signatureFailures: number; rejected: number; undecodable: number }>;
  return { signatureFailures: counts.signatureFailures ?? 0, unreadable: (counts.rejected ?? 0) + (counts.undecodable ?? 0) };
}
