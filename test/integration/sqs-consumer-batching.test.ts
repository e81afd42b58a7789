/**
 * SqsConsumer's receive and delete path against ElasticMQ and PostgreSQL:
 * several ReceiveMessage calls in flight (receiveConcurrency) within
 * maxInFlight, with per-key order on a FIFO queue; a message group's run of
 * messages committed in fewer inbox transactions than messages; deletes
 * collected into DeleteMessageBatch requests across settles (a partial batch
 * waits for the request in flight). Queues are named per run and deleted.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GetQueueAttributesCommand, SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { createInbox, uuidv7, type InboxStore, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { encodeSqsMessage, SqsConsumer, type SqsConsumerOptions } from 'txbox/sqs';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { assertNoOpenHandles } from '../helpers/open-handles.ts';
import { createQueue, deleteQueues, SQS_ENDPOINT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { waitFor } from '../helpers/wait.ts';

let db: TestDb;
let sqs: SQSClient;
const queues: string[] = [];
let n = 0;

/** An SQS client of the test's own, with a hook around each command: `around(name, send)`. */
function hookedClient(around: (command: string, send: () => Promise<unknown>, input: Record<string, unknown>) => Promise<unknown>): SQSClient {
  const client = new SQSClient({ region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: { ...TEST_CREDENTIALS }, maxAttempts: 1 });
  client.middlewareStack.add((next, context) => (args) => around(context.commandName ?? '', () => next(args), args.input as Record<string, unknown>) as ReturnType<typeof next>, { step: 'initialize' });
  return client;
}

/** Counts the inbox's transactions (runBatch calls) and the events in each. */
function countingStore(inner: InboxStore): { store: InboxStore; transactions: number[] } {
  const transactions: number[] = [];
  const store: InboxStore = {
    runBatch: (consumer, events, handler, options) => {
      transactions.push(events.length);
      return inner.runBatch(consumer, events, handler, options);
    },
    recordFailure: (...a) => inner.recordFailure(...a),
    hold: (...a) => inner.hold(...a),
    recheckHeld: (...a) => inner.recheckHeld(...a),
    redrivable: (...a) => inner.redrivable(...a),
  };
  return { store, transactions };
}

describe('SqsConsumer receive and delete batching on ElasticMQ and PostgreSQL', () => {
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, consumer text NOT NULL, version int NOT NULL)`);
    sqs = sqsClient();
  });
  after(async () => {
    await deleteQueues(sqs, queues);
    sqs.destroy();
    await db.close();
    await assertNoOpenHandles();
  });

  async function fresh(fifo: boolean): Promise<string> {
    const dlq = await createQueue(sqs, uniqueQueueName('txbox-b-dlq', fifo));
    const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ['QueueArn'] }));
    const url = await createQueue(sqs, uniqueQueueName('txbox-b', fifo), { VisibilityTimeout: '60', RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes!.QueueArn, maxReceiveCount: 5 }) });
    queues.push(url, dlq);
    return url;
  }

  const events = (keys: number, perKey: number): OutboxEvent[] =>
    Array.from({ length: keys * perKey }, (_, i) => {
      const k = `k${i % keys}`;
      return { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: k, key: `Item:${k}`, destination: 'items', payload: { i }, headers: {}, occurredAt: new Date(), version: Math.floor(i / keys) + 1 };
    });

  async function load(url: string, list: readonly OutboxEvent[]): Promise<void> {
    const fifo = url.endsWith('.fifo');
    for (let i = 0; i < list.length; i += 10) {
      const entries = list.slice(i, i + 10).map((e, j) => {
        const m = encodeSqsMessage(e, fifo);
        return { Id: `e${j}`, MessageBody: m.body, MessageAttributes: m.attributes, MessageGroupId: m.groupId, MessageDeduplicationId: m.deduplicationId };
      });
      const out = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: entries }));
      assert.equal(out.Failed?.length ?? 0, 0);
    }
  }

  function consumerFor(url: string, extra: Partial<SqsConsumerOptions>): SqsConsumer {
    return new SqsConsumer({ queueUrl: url, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS, destination: 'items', waitTimeSeconds: 1, stopTimeoutMs: 5000, ...extra } as SqsConsumerOptions);
  }

  it('FIFO: receiveConcurrency long polls in flight at once, never more than maxInFlight held; a group\'s run commits in fewer transactions than messages, in per-key order', async () => {
    const url = await fresh(true);
    let receiving = 0;
    let maxReceiving = 0;
    const client = hookedClient(async (command, send) => {
      if (command !== 'ReceiveMessageCommand') return send();
      maxReceiving = Math.max(maxReceiving, ++receiving);
      try {
        return await send();
      } finally {
        receiving--;
      }
    });
    const { store, transactions } = countingStore(new PostgresInboxStore({ connection: db.connection, schema: db.schema }));
    const inbox = createInbox({ store, consumer: `b-${++n}` });
    const seen = new Map<string, number[]>();
    let maxHeld = 0;
    const consumer = consumerFor(url, { client, inbox, receiveConcurrency: 4, maxInFlight: 40, concurrency: 8 });
    inbox.on('Changed', async (event) => {
      maxHeld = Math.max(maxHeld, consumer.inFlight);
      seen.set(event.key, [...(seen.get(event.key) ?? []), event.version!]);
    });
    await consumer.start();
    try {
      // An empty queue: every receive is a long poll, all four at once (4 × 10 asked for fits in maxInFlight 40).
      await waitFor('four receives in flight', () => receiving === 4, 30_000);
      const list = events(2, 50);
      await load(url, list);
      await waitFor('every event applied', () => consumer.stats.processed === list.length, 60_000);
      await waitFor('every message deleted', () => consumer.stats.deleted === list.length, 30_000);
    } finally {
      await consumer.stop();
      client.destroy();
    }
    assert.equal(maxReceiving, 4);
    assert.ok(maxHeld <= 40, `held ${maxHeld} > maxInFlight 40`);
    for (const [key, versions] of seen) assert.deepEqual(versions, Array.from({ length: 50 }, (_, i) => i + 1), `${key}: applied once each, in order`);
    // One at a time, a key's 50 events would take 50 transactions each; its runs take fewer.
    assert.ok(transactions.length < 50, `${transactions.length} transactions for 100 events of 2 keys`);
  });

  it('maxInFlight below receiveConcurrency full batches: receives ask within it, never more held, and everything is applied', async () => {
    const url = await fresh(false);
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: `b-${++n}` });
    let maxHeld = 0;
    const consumer = consumerFor(url, { inbox, receiveConcurrency: 3, maxInFlight: 5 });
    inbox.on('Changed', async () => void (maxHeld = Math.max(maxHeld, consumer.inFlight)));
    await load(url, events(40, 1));
    await consumer.start();
    try {
      await waitFor('every event applied', () => consumer.stats.processed === 40, 60_000);
    } finally {
      await consumer.stop();
    }
    assert.ok(maxHeld <= 5, `held ${maxHeld} > maxInFlight 5`);
  });

  it('FIFO: a handler failing in the middle of a run retries it after its delay, then the rest of the run: the effects commit in order, each once', async () => {
    const url = await fresh(true);
    const name = `b-${++n}`;
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: name, retry: { maxAttempts: 5, baseDelayMs: 200, maxDelayMs: 200 } });
    let failedOnce = false;
    inbox.on('Changed', async (event, tx) => {
      if (event.version === 3 && !failedOnce) {
        failedOnce = true;
        throw new Error('the first attempt fails');
      }
      // In the inbox's transaction: a run rolled back by the failure leaves nothing.
      await tx.query(`INSERT INTO "${db.schema}".effects (consumer, version) VALUES ($1, $2)`, [name, event.version]);
    });
    const consumer = consumerFor(url, { inbox });
    await load(url, events(1, 8));
    await consumer.start();
    try {
      await waitFor('every event applied', () => consumer.stats.processed === 8, 30_000);
      await waitFor('every message deleted', () => consumer.stats.deleted === 8, 30_000);
    } finally {
      await consumer.stop();
    }
    assert.equal(failedOnce, true);
    const rows = await db.query<{ version: number }>(`SELECT version FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY seq`, [name]);
    assert.deepEqual(rows.map((r) => r.version), [1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it('deletes are collected across settles: 10 go at once, a partial batch waits for the request in flight', async () => {
    const url = await fresh(false);
    const deletes: number[] = [];
    let openGate: () => void = () => {};
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const client = hookedClient(async (command, send, input) => {
      if (command !== 'DeleteMessageBatchCommand') return send();
      deletes.push((input['Entries'] as unknown[]).length);
      if (deletes.length === 1) await gate; // the first request stays in flight until the test opens it
      return send();
    });
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: `b-${++n}` });
    inbox.on('Changed', async () => {});
    // One handler at a time: each settle (and its delete) comes in a turn of its own.
    const consumer = consumerFor(url, { client, inbox, concurrency: 1 });
    await load(url, events(12, 1));
    await consumer.start();
    try {
      await waitFor('12 events applied', () => consumer.stats.processed === 12, 60_000);
      await waitFor('the full batch sent', () => deletes.length === 2, 10_000);
      assert.deepEqual(deletes, [1, 10], 'the first alone (nothing was in flight), then 10 at once; the 12th waits');
      openGate();
      await waitFor('every message deleted', () => consumer.stats.deleted === 12, 30_000);
      assert.deepEqual(deletes, [1, 10, 1]);
    } finally {
      openGate();
      await consumer.stop();
      client.destroy();
    }
  });
});
