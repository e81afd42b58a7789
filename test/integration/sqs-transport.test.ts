/**
 * SqsTransport through a real relay and PostgreSQL outbox, against ElasticMQ
 * (scripts/sqs/up.sh): a queue that does not exist yet is a destination down
 * (its events wait in order, attempts unchanged, nothing parked, the other
 * destination flows) and everything arrives once the queue is created; an
 * oversize event parks with a reason naming maxMessageBytes while the rest of
 * its destination flows; what is sent (body, attributes, FIFO ids) as SQS
 * stores it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { createOutbox, createRelay, defineEvent, payloadType, uuidv7 } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { decodeSqsMessage, SqsTransport } from 'txbox/sqs';
import { checkDeliveries, type Delivered } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { createQueue, deleteQueues, queueUrl, SQS_ENDPOINT, SQS_PORT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number; pad?: string }>() });
const Charged = defineEvent({ type: 'Charged', aggregateType: 'Invoice', destination: 'billing', payload: payloadType<{ n: number }>() });

describe('SqsTransport through the relay (ElasticMQ, PostgreSQL)', () => {
  let db: TestDb;
  let sqs: SQSClient;
  const queues: string[] = [];
  before(async () => {
    db = await openDb('postgres');
    sqs = sqsClient();
  });
  after(async () => {
    await deleteQueues(sqs, queues);
    sqs.destroy();
    await db.close();
  });

  /** Everything in the queue, in receive order (deleted as read). */
  async function drain(url: string, into: Delivered[], raw: { groupId?: string; attributes: string[] }[] = []): Promise<void> {
    for (;;) {
      const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['MessageGroupId'] }));
      if (Messages.length === 0) return;
      for (const m of Messages) {
        const decoded = decodeSqsMessage(m, 'x');
        assert.ok(decoded.ok, decoded.ok ? '' : decoded.message);
        into.push({ id: decoded.event.id, key: decoded.event.key });
        raw.push({ ...(m.Attributes?.MessageGroupId ? { groupId: m.Attributes.MessageGroupId } : {}), attributes: Object.keys(m.MessageAttributes ?? {}).sort() });
      }
      await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: url, Entries: Messages.map((m, i) => ({ Id: `m${i}`, ReceiptHandle: m.ReceiptHandle! })) }));
    }
  }

  it('a service that answers nothing (connection open, a black hole) is destination-down after requestTimeoutMs', async () => {
    const url = await createQueue(sqs, uniqueQueueName('silent', false), {});
    queues.push(url);
    const proxy = await startTcpProxy(SQS_PORT);
    const transport = new SqsTransport({ queues: { orders: url }, region: 'us-east-1', endpoint: `http://127.0.0.1:${proxy.port}`, credentials: TEST_CREDENTIALS, requestTimeoutMs: 500 });
    await transport.start(new AbortController().signal);
    const event = (n: number) => ({ id: uuidv7(), type: 'OrderPlaced', aggregateType: 'Order', aggregateId: String(n), key: `Order:${n}`, destination: 'orders', payload: { n }, headers: {}, occurredAt: new Date(), version: null });
    try {
      const [ok] = await transport.publish([event(1)], new AbortController().signal);
      assert.ok(ok?.ok, JSON.stringify(ok));
      proxy.hold();
      proxy.silence();
      const [silent] = await transport.publish([event(2)], new AbortController().signal);
      assert.ok(silent && !silent.ok && silent.error.kind === 'destination-down', JSON.stringify(silent));
      assert.match(silent.error.message, /no answer within 500 ms/);
    } finally {
      proxy.release();
      await transport.close();
      await proxy.close();
    }
  });

  it('a missing queue pauses its destination (attempts unchanged, nothing parked) while the other flows; once created, all arrive in order', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed, Charged] });
    const ordersUrl = await createQueue(sqs, uniqueQueueName('txbox-t-orders', true));
    const billingName = uniqueQueueName('txbox-t-billing', true);
    const billingUrl = queueUrl(billingName);
    queues.push(ordersUrl, billingUrl);
    const committed = new Map<string, string[]>();
    for (let i = 0; i < 5; i++) {
      await db.transaction(async (tx) => {
        for (let k = 0; k < 4; k++) {
          for (const [def, type] of [[Charged, 'Invoice'], [Placed, 'Order']] as const) {
            const [id] = await outbox.enqueue(tx, def({ aggregateId: k, payload: { n: i } }));
            committed.set(`${type}:${k}`, [...(committed.get(`${type}:${k}`) ?? []), id!]);
          }
        }
      });
    }
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport: new SqsTransport({ queues: { orders: ordersUrl, billing: billingUrl }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS }),
      pollIntervalMs: 50,
      retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 2 },
      circuitBreaker: { baseDelayMs: 100, maxDelayMs: 400 },
    });
    await relay.start();
    const got: Delivered[] = [];
    try {
      await waitFor('orders delivered', async () => {
        await drain(ordersUrl, got);
        return got.length === 20;
      }, 30_000);
      const rows = await db.query<{ state: string; attempts: number }>(`SELECT state, attempts FROM "${db.schema}".outbox WHERE destination = 'billing'`);
      assert.equal(rows.length, 20);
      assert.ok(rows.every((r) => r.state === 'pending' && r.attempts === 0), `billing waits, unparked, attempts unchanged: ${JSON.stringify(rows.slice(0, 3))}`);
      await createQueue(sqs, billingName);
      // Unique ids: a redelivered message (at least once) must not make the count overshoot and the wait miss it.
      await waitFor('billing delivered after the queue was created', async () => {
        await drain(billingUrl, got);
        return new Set(got.map((g) => g.id)).size >= 40;
      }, 30_000);
    } finally {
      await relay.stop();
    }
    const report = checkDeliveries(committed, got);
    assert.deepEqual([report.lost, report.orderViolations, report.phantom], [0, 0, 0]);
  });

  it('an oversize event parks with a reason naming maxMessageBytes; the rest of its destination flows; FIFO ids and attributes as sent', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed], maxPayloadBytes: 1_000_000 });
    const url = await createQueue(sqs, uniqueQueueName('txbox-t-big', true));
    queues.push(url);
    await db.transaction(async (tx) => {
      await outbox.enqueue(tx, Placed({ aggregateId: 'big', payload: { n: 0, pad: 'x'.repeat(300_000) } }));
      await outbox.enqueue(tx, Placed({ aggregateId: 'small', payload: { n: 1 }, headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } }));
    });
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport: new SqsTransport({ queues: { orders: url }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS }),
      pollIntervalMs: 50,
    });
    await relay.start();
    const got: Delivered[] = [];
    const raw: { groupId?: string; attributes: string[] }[] = [];
    try {
      await waitFor('the big one parked', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked' AND aggregate_id = 'big'`)).length === 1, 30_000);
      await waitFor('the small one delivered', async () => {
        await drain(url, got, raw);
        return got.length === 1;
      }, 30_000);
    } finally {
      await relay.stop();
    }
    const [parked] = await db.query<{ last_error: string }>(`SELECT last_error FROM "${db.schema}".outbox WHERE aggregate_id = 'big'`);
    assert.match(parked!.last_error, /over maxMessageBytes \(262144\)/);
    assert.equal(got[0]!.key, 'Order:small');
    assert.deepEqual(raw[0], { groupId: 'Order:small', attributes: ['traceparent', 'txbox-envelope'] });
  });
});
