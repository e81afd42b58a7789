/**
 * OpenTelemetry end to end over the cloud brokers (the others: tracing.test.ts,
 * tracing-kafka.test.ts): one trace from the producer's span through the
 * relay's publish span to the consumer's span in which the handler runs, with
 * the context carried as Pub/Sub attributes (the Pub/Sub emulator) and as SQS
 * message attributes (ElasticMQ).
 */
import { after, before, describe, it } from 'node:test';
import { randomBytes } from 'node:crypto';
import { PubSubConsumer, PubSubTransport, type PubSubConsumerOptions } from 'txbox/pubsub';
import { SqsConsumer, SqsTransport, type SqsConsumerOptions } from 'txbox/sqs';
import type { TestDb } from '../helpers/databases.ts';
import { adminClient, EMULATOR_HOST, emulatorSkip, PROJECT } from '../helpers/pubsub.ts';
import { createQueue, deleteQueues, sqsClient, SQS_ENDPOINT, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { assertOneTrace, produce, recordingInbox, registerOtel, relayUntilHandled, tracingDb } from '../fixtures/tracing-harness.ts';

const pubsubSkip = await emulatorSkip();
let db: TestDb;

before(async () => {
  registerOtel();
  db = await tracingDb();
});
after(async () => {
  await db?.close();
});

describe('Pub/Sub', { skip: pubsubSkip }, () => {
  it('one trace from producer to handler (PubSubTransport -> PubSubConsumer)', { timeout: 120_000 }, async () => {
    const admin = adminClient();
    const run = randomBytes(4).toString('hex');
    const [topic] = await admin.createTopic(`trace-${run}`);
    const [sub] = await topic.createSubscription(`trace-${run}-sub`, { enableMessageOrdering: true });
    const { inbox, runs } = recordingInbox(db, 'pubsub');
    const consumer = new PubSubConsumer({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, subscription: sub.name, destination: 'items', stopTimeoutMs: 5000, inbox } as PubSubConsumerOptions);
    const transport = new PubSubTransport({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, topics: { items: topic.name } });
    await consumer.start();
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'pubsub');
    } finally {
      await transport.close();
      await consumer.stop();
      inbox.stop();
      await sub.delete().catch(() => {});
      await topic.delete().catch(() => {});
      await admin.close();
    }
  });
});

describe('SQS', () => {
  it('one trace from producer to handler (SqsTransport -> SqsConsumer, FIFO)', { timeout: 120_000 }, async () => {
    const sqs = sqsClient();
    const url = await createQueue(sqs, uniqueQueueName('trace', true));
    const dlq = await createQueue(sqs, uniqueQueueName('trace-dead', true));
    const { inbox, runs } = recordingInbox(db, 'sqs');
    const consumer = new SqsConsumer({ queueUrl: url, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS, destination: 'items', waitTimeSeconds: 1, stopTimeoutMs: 5000, deadLetterQueueUrl: dlq, inbox } as SqsConsumerOptions);
    const transport = new SqsTransport({ queues: { items: url }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS });
    await consumer.start();
    try {
      const { id, producer } = await produce(db);
      await relayUntilHandled(db, transport, runs, id);
      assertOneTrace(id, producer, runs, 'sqs');
    } finally {
      await transport.close();
      await consumer.stop();
      inbox.stop();
      await deleteQueues(sqs, [url, dlq]);
      sqs.destroy();
    }
  });
});
