/**
 * SqsConsumer processes killed with kill -9 (test/fixtures/cloud-consumer.ts
 * over the shared scenario of cloud-consumer-crash.ts) on a FIFO queue:
 * inside a handler's transaction, then between a commit and its delete; the
 * messages they held come back after the visibility timeout (2 s), each
 * message group in order, and the inbox skips what committed. Every event is
 * applied once, in per-key order. Then an ElasticMQ restart under a running
 * consumer: a private server on a port of its own (a restart of the shared
 * one would empty it under the other SQS test files), whose queues the test
 * creates again after the restart, since ElasticMQ keeps them in memory.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { createInbox, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { SqsConsumer, SqsTransport } from 'txbox/sqs';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { freePort } from '../helpers/ports.ts';
import { createQueue, deleteQueues, elasticMq, queueUrl, SQS_ENDPOINT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { waitFor } from '../helpers/wait.ts';
import { createCrashEffects, crashWaves, runCrashScenario } from '../fixtures/cloud-consumer-crash.ts';

let db: TestDb;

async function publish(endpoint: string, url: string, waves: readonly OutboxEvent[][]): Promise<void> {
  const transport = new SqsTransport({ queues: { items: url }, region: 'us-east-1', endpoint, credentials: TEST_CREDENTIALS });
  try {
    await transport.start();
    for (const wave of waves) {
      const outcomes = await transport.publish(wave, AbortSignal.timeout(30_000));
      assert.ok(outcomes.every((o) => o.ok), JSON.stringify(outcomes.find((o) => !o.ok)));
    }
  } finally {
    await transport.close();
  }
}

/** A FIFO queue (visibility 2 s) with a redrive policy to its own FIFO dead-letter queue; returns both URLs. */
async function fifoQueue(client: SQSClient, name: string, port?: number): Promise<{ url: string; dlq: string }> {
  const dlq = await createQueue(client, `${name}-dlq.fifo`, {}, port);
  const { Attributes } = await client.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ['QueueArn'] }));
  const url = await createQueue(client, `${name}.fifo`, { VisibilityTimeout: '2', RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes!.QueueArn, maxReceiveCount: 10 }) }, port);
  return { url, dlq };
}

describe('SqsConsumer crashes and ElasticMQ restarts', () => {
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await createCrashEffects(db);
  });
  after(async () => {
    await db?.close();
  });

  it('FIFO: killed inside a handler, then between commit and delete, then restarted: every event applied once, in per-key order', { timeout: 240_000 }, async () => {
    const admin = sqsClient();
    const { url, dlq } = await fifoQueue(admin, uniqueQueueName('txbox-crash', false));
    try {
      const { waves, committed } = crashWaves(20, 8, 'k');
      await publish(SQS_ENDPOINT, url, waves);
      await runCrashScenario(db, { BROKER: 'sqs', SQS_ENDPOINT, QUEUE_URL: url }, committed);
      const { Attributes = {} } = await admin.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }));
      assert.deepEqual([Attributes['ApproximateNumberOfMessages'], Attributes['ApproximateNumberOfMessagesNotVisible']], ['0', '0'], 'every message deleted');
    } finally {
      await deleteQueues(admin, [url, dlq]);
      admin.destroy();
    }
  });

  it('ElasticMQ restarted under a running consumer (queues made again): receiving recovers by itself and applies what arrives', { timeout: 240_000 }, async () => {
    const port = await freePort();
    const server = elasticMq(port);
    const endpoint = `http://127.0.0.1:${port}`;
    const name = uniqueQueueName('txbox-restart', false);
    const url = queueUrl(`${name}.fifo`, port);
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'restart' });
    const applied: { id: string; key: string }[] = [];
    inbox.on('Changed', async (event) => void applied.push({ id: event.id, key: event.key }));
    const consumer = new SqsConsumer({ queueUrl: url, region: 'us-east-1', endpoint, credentials: TEST_CREDENTIALS, destination: 'items', inbox, waitTimeSeconds: 1, requestTimeoutMs: 3000, stopTimeoutMs: 5000 });
    const errors: string[] = [];
    consumer.events.on('error', (e) => errors.push(e.operation));
    server.up();
    let admin = sqsClient(endpoint);
    try {
      await fifoQueue(admin, name, port);
      const { waves, committed } = crashWaves(5, 4, 'r');
      await consumer.start();
      await publish(endpoint, url, waves.slice(0, 2));
      await waitFor('the events before the restart applied', () => applied.length === 10, 30_000);

      server.kill();
      await waitFor('a receive failed', () => errors.includes('receive'), 30_000, 100);
      await waitFor('not ready while the server is down', async () => !(await consumer.health()).ready, 10_000, 100);
      server.up();
      admin.destroy(); // its kept-alive sockets went with the server
      admin = sqsClient(endpoint);
      await fifoQueue(admin, name, port);
      await publish(endpoint, url, waves.slice(2));
      await waitFor('the events after the restart applied', () => applied.length === 20, 120_000, 100);
      await waitFor('ready again', async () => (await consumer.health()).ready, 30_000, 100);
      const report = checkDeliveries(committed, applied);
      assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
    } finally {
      await consumer.stop();
      admin.destroy();
      server.down();
    }
  });
});
