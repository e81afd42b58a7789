/**
 * The independent observer behind the transport: the demo's receiving sides,
 * which read what actually arrived (HTTP: a receiver in this process that
 * verifies every signature; brokers: a reader of the topic, stream, subject
 * or exchange of this run; on RabbitMQ a durable exchange and queue named
 * after the run, `txbox_torture_<run>`, whose reader reconnects; on the
 * Pub/Sub emulator a topic and an ordering subscription, and on an SQS
 * emulator a FIFO queue, both `txbox-torture-<run>`).
 */
import type { DemoSink } from '../demo/demo-sink.ts';
import type { TortureTransport } from './torture-options.ts';

export async function createObserver(transport: TortureTransport, url: string | undefined, run: string, inbox = false): Promise<DemoSink> {
  switch (transport) {
    case 'http':
      return new (await import('../demo/http-sink.ts')).HttpDemoSink();
    case 'kafka':
      return new (await import('../demo/kafka-sink.ts')).KafkaDemoSink(url ? { brokers: url } : {});
    case 'nats':
      return new (await import('../demo/nats-sink.ts')).NatsDemoSink(url ? { servers: url } : {});
    case 'rabbitmq':
      // Durable and declared before the relays start: a dropped connection or a broker restart costs the reader duplicates, not arrivals.
      return new (await import('../demo/rabbitmq-sink.ts')).RabbitMqDemoSink({ ...(url ? { url } : {}), name: `txbox_torture_${run}`, durable: true });
    case 'redis':
      return new (await import('../demo/redis-sink.ts')).RedisDemoSink(url ?? 'redis://127.0.0.1:6379');
    case 'pubsub': {
      // A topic and the observer's ordering subscription; with --inbox the consumers add a subscription of their own.
      const { PubSubDemoSink, pubsubEmulatorAddress } = await import('../demo/pubsub-sink.ts');
      return new PubSubDemoSink({ ...pubsubEmulatorAddress(url, process.env), name: `txbox-torture-${run}` });
    }
    case 'sqs':
      // One FIFO queue. SQS hands each message to one receiver, so with --inbox the consumer processes read it and the
      // observer only creates it: the consumers' applied table is then the evidence (observes() is false).
      return new (await import('../demo/sqs-sink.ts')).SqsDemoSink({ ...(url ? { endpoint: url } : {}), name: `txbox-torture-${run}`, read: !inbox, visibilityTimeoutSeconds: 5 });
  }
}

/**
 * Whether the observer reads what the relays publish. Not with --inbox over
 * HTTP (the relays post to the consumer processes) nor over SQS (a message
 * goes to one receiver: the consumer processes): the consumers' applied
 * table is then what the run checks.
 */
export function observes(transport: TortureTransport, inbox: boolean): boolean {
  return !(inbox && (transport === 'http' || transport === 'sqs'));
}

/** What the report names as the receiving side when the observer does not read (observes() is false). */
export function inboxOnlyLabel(transport: TortureTransport, sink: DemoSink, consumers: number): string {
  return transport === 'http' ? `HTTP webhooks to ${consumers} inbox consumer processes` : `${sink.name}, read by ${consumers} inbox consumer processes`;
}

/** Times the observer lost its connection (or channel) and read again (RabbitMQ; 0 elsewhere). */
export function observerReconnects(sink: DemoSink): number {
  return (sink as Partial<{ resubscribed: number }>).resubscribed ?? 0;
}

/** Signature failures and unreadable requests the observer counted (HTTP only; brokers: 0). */
export function observerRejections(sink: DemoSink): { signatureFailures: number; unreadable: number } {
  const counts = sink as Partial<{ signatureFailures: number; rejected: number; undecodable: number }>;
  return { signatureFailures: counts.signatureFailures ?? 0, unreadable: (counts.rejected ?? 0) + (counts.undecodable ?? 0) };
}
