/**
 * `txbox relay --transport sqs`: the CLI builds the SQS transport from the
 * config file (queues) and --transport-url (the endpoint), with the AWS SDK's
 * default credential chain (here AWS_* variables for ElasticMQ), and publishes
 * to a FIFO queue with the key as its message group.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { startCli } from '../helpers/cli.ts';
import { createQueue, deleteQueues, sqsClient, SQS_ENDPOINT, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { waitFor } from '../helpers/wait.ts';

describe('txbox relay --transport sqs', () => {
  let db: TestDb;
  const client = sqsClient();
  let url = '';

  before(async () => {
    db = await openDb('postgres');
    url = await createQueue(client, uniqueQueueName('cli-orders', true));
  });
  after(async () => {
    await deleteQueues(client, [url]);
    client.destroy();
    await db.close();
  });

  it('publishes an enqueued event to the FIFO queue named in the config file, grouped by key', async () => {
    const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ total: number }>() });
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderPlaced] });
    const [id] = await db.transaction((tx) => outbox.enqueue(tx, OrderPlaced({ aggregateId: 'o-1', payload: { total: 12 } })));

    const dir = mkdtempSync(join(tmpdir(), 'txbox-sqs-cli-'));
    const config = join(dir, 'txbox.config.json');
    writeFileSync(config, JSON.stringify({ transport: { type: 'sqs', region: 'us-east-1', queues: { orders: url } } }));
    const relay = startCli(['relay', '--config', config, '--transport-url', SQS_ENDPOINT, '--relay-id', `cli-sqs-${db.schema}`.slice(0, 40)], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
      AWS_ACCESS_KEY_ID: TEST_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: TEST_CREDENTIALS.secretAccessKey,
    });
    try {
      await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()), 60_000);
      assert.match(relay.stdout(), /transport=sqs$/m);
      const messages: { body: string; group: string | undefined; dedup: string | undefined }[] = [];
      await waitFor('the message in the queue', async () => {
        const r = await client.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageSystemAttributeNames: ['All'] }));
        for (const m of r.Messages ?? []) messages.push({ body: m.Body ?? '', group: m.Attributes?.MessageGroupId, dedup: m.Attributes?.MessageDeduplicationId });
        return messages.length >= 1;
      }, 60_000);
      assert.deepEqual(JSON.parse(messages[0]!.body), { total: 12 });
      assert.equal(messages[0]!.group, 'Order:o-1');
      assert.equal(messages[0]!.dedup, id);
    } finally {
      relay.child.kill('SIGTERM');
      const exit = await relay.exited;
      assert.equal(exit.code, 0, `relay exit: ${exit.stderr}`);
    }
  });
});
