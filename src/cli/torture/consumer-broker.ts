/**
 * What the `txbox torture --inbox` consumers need on a broker beyond the
 * observer's own topic, stream or exchange, and its removal at the end:
 * RabbitMQ, a durable queue of the run bound to the observer's exchange
 * (each message then reaches both the observer's queue and this one); Kafka,
 * the consumers' group (they read the observer's topic in a group of their
 * own); Pub/Sub, a subscription of the run on the observer's topic (each
 * message then reaches both subscriptions; unordered, see
 * ensureConsumerSubscription); SQS, a FIFO dead-letter queue for the
 * consumers (they read the observer's queue, which the observer then leaves
 * to them). Redis, NATS and HTTP need nothing more.
 */
import { importOptional } from '../optional-import.ts';
import type { RelayTransportConfig } from '../demo/demo-sink.ts';
import { DESTINATIONS } from './producers.ts';

/** The consumers' group (Kafka, Redis) or durable consumer (NATS) of one run. */
export const consumerGroupOf = (run: string): string => `torture-${run}`;

/** RabbitMQ: the consumers' queue, `<exchange>.inbox`. */
export const consumerQueueOf = (transport: RelayTransportConfig): string => `${String(transport.exchange)}.inbox`;

/** RabbitMQ: binds the consumers' queue (declared by RabbitMqConsumer's assertQueues) to every destination's routing key on the run's exchange. Idempotent. */
export async function bindConsumerQueue(transport: RelayTransportConfig): Promise<void> {
  const { connect } = await importOptional('txbox torture --inbox over RabbitMQ', () => import('amqplib'));
  const model = await connect(String(transport.url));
  try {
    const ch = await model.createChannel();
    for (const d of DESTINATIONS) await ch.bindQueue(consumerQueueOf(transport), String(transport.exchange), d);
  } finally {
    await model.close().catch(() => {});
  }
}

/** Pub/Sub: the consumers' subscription, `<topic>-inbox`. */
export const consumerSubscriptionOf = (transport: RelayTransportConfig): string => `${(transport.topics as Record<string, string>).orders}-inbox`;

/** SQS: the consumers' dead-letter queue, `<queue>-dead.fifo`, next to the observer's FIFO queue. */
export const consumerDeadQueueOf = (transport: RelayTransportConfig): string => {
  const url = (transport.queues as Record<string, string>).orders!;
  return `${decodeURIComponent(url.split('/').at(-1)!).replace(/\.fifo$/, '')}-dead.fifo`;
};

/** A Pub/Sub client for the emulator the torture relays publish to. */
async function pubsubClient(transport: RelayTransportConfig): Promise<import('@google-cloud/pubsub').PubSub> {
  const [{ resolvePubSubConnection }, { clientOf }] = await importOptional('txbox torture --inbox over Pub/Sub', () =>
    Promise.all([import('../../transports/pubsub/pubsub-transport-options.ts'), import('../../transports/pubsub/pubsub-outcomes.ts')]),
  );
  return clientOf(resolvePubSubConnection({ projectId: String(transport.projectId), emulatorHost: String(transport.emulatorHost) })).client;
}

/** An SQS client for the endpoint the torture relays publish to. */
async function sqsClient(transport: RelayTransportConfig): Promise<[import('@aws-sdk/client-sqs').SQSClient, typeof import('@aws-sdk/client-sqs')]> {
  const sdk = await importOptional('txbox torture --inbox over SQS', () => import('@aws-sdk/client-sqs'));
  const credentials = transport.credentials as { accessKeyId: string; secretAccessKey: string };
  return [new sdk.SQSClient({ region: String(transport.region), endpoint: String(transport.endpoint), credentials: { ...credentials }, maxAttempts: 3 }), sdk];
}

/**
 * Pub/Sub: creates the consumers' subscription on the run's topic if it does
 * not exist yet (each consumer process calls it before it starts). Without
 * message ordering: on the emulator (0.8.20), after a subscriber of an
 * ordering subscription is killed, some of the ordering keys it held are
 * never delivered again (measured: 4 of 50 keys still stuck 60 s after the
 * kill, while an unordered subscription had redelivered everything within
 * 30 s), which would fail every run for the emulator's sake. The inbox's
 * version guard holds an early version until its predecessor is applied, so
 * each key is still applied in order (as with RabbitMQ's competing
 * consumers); the observer's own subscription, never killed, is ordered and
 * checks the broker's per-key order.
 */
export async function ensureConsumerSubscription(transport: RelayTransportConfig): Promise<void> {
  const client = await pubsubClient(transport);
  try {
    const topics = transport.topics as Record<string, string>;
    await client.topic(topics.orders!).createSubscription(consumerSubscriptionOf(transport), { enableMessageOrdering: false, ackDeadlineSeconds: 10 }).catch((err: unknown) => {
      if ((err as { code?: unknown }).code !== 6) throw err; // ALREADY_EXISTS: another consumer process made it
    });
  } finally {
    await client.close().catch(() => {});
  }
}

/** SQS: creates the consumers' FIFO dead-letter queue (idempotent: SQS returns the existing one) and returns its URL. */
export async function ensureConsumerDeadQueue(transport: RelayTransportConfig): Promise<string> {
  const [client, sdk] = await sqsClient(transport);
  try {
    const out = await client.send(new sdk.CreateQueueCommand({ QueueName: consumerDeadQueueOf(transport), Attributes: { FifoQueue: 'true' } }), { abortSignal: AbortSignal.timeout(15_000) });
    if (!out.QueueUrl) throw new Error(`SQS created no URL for ${consumerDeadQueueOf(transport)}`);
    return out.QueueUrl;
  } finally {
    client.destroy();
  }
}

/** Deletes what the consumers left on the broker (RabbitMQ: their queue, its dead-letter queue and exchange; Kafka: their group; Pub/Sub: their subscription; SQS: their dead-letter queue). Best effort. */
export async function dropConsumerState(transport: RelayTransportConfig, run: string): Promise<void> {
  if (transport.type === 'rabbitmq') {
    const { connect } = await import('amqplib');
    const model = await connect(String(transport.url));
    model.on('error', () => {});
    try {
      const ch = await model.createChannel();
      ch.on('error', () => {});
      const queue = consumerQueueOf(transport);
      await ch.deleteQueue(queue);
      await ch.deleteQueue(`${queue}.dead`);
      await ch.deleteExchange(`${queue}.dlx`);
    } finally {
      await model.close().catch(() => {});
    }
  } else if (transport.type === 'kafka') {
    const { Kafka, logLevel } = (await import('kafkajs')).default;
    const admin = new Kafka({ brokers: transport.brokers as string[], clientId: 'txbox-torture-cleanup', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      await admin.deleteGroups([consumerGroupOf(run)]);
    } finally {
      await admin.disconnect().catch(() => {});
    }
  } else if (transport.type === 'pubsub') {
    const client = await pubsubClient(transport);
    try {
      await client.subscription(consumerSubscriptionOf(transport)).delete();
    } finally {
      await client.close().catch(() => {});
    }
  } else if (transport.type === 'sqs') {
    const [client, sdk] = await sqsClient(transport);
    try {
      const { QueueUrl } = await client.send(new sdk.GetQueueUrlCommand({ QueueName: consumerDeadQueueOf(transport) }), { abortSignal: AbortSignal.timeout(15_000) });
      if (QueueUrl) await client.send(new sdk.DeleteQueueCommand({ QueueUrl }), { abortSignal: AbortSignal.timeout(15_000) });
    } finally {
      client.destroy();
    }
  }
}
