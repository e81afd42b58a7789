/**
 * SqsConsumer against ElasticMQ (scripts/sqs/up.sh, 127.0.0.1:9324) and the
 * real PostgreSQL: per-group order on a FIFO queue with keys in parallel, a
 * message delivered three times applied once, delete only after the commit,
 * redelivery after the visibility timeout of a message a crashed consumer
 * took, a handler slower than the visibility timeout (extended), a poison
 * message moved to the DLQ by the queue's redrive policy, txbox's own
 * dead-letter queue, worker mode, health and start-up errors naming the
 * setting. Queues are named per run and deleted afterwards.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from 'node:http';
import { GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { ConfigError, createInbox, uuidv7, type Inbox, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox, migratePostgres, postgresNames } from 'txbox/postgres';
import { encodeSqsMessage, SqsConsumer, SqsTransport, type SqsConsumerOptions } from 'txbox/sqs';
import { checkDeliveries } from 'txbox/testing';
import { openDb, refuseInboxRows, type TestDb } from '../helpers/databases.ts';
import { createQueue, CuttableProxy, deleteQueues, queueUrl, SQS_ENDPOINT, SQS_PORT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';
import { waitFor } from '../helpers/wait.ts';
import { startWhileUnreachable } from '../helpers/outage.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';
import { runWorkerModeScenario } from '../fixtures/worker-mode.ts';

let db: TestDb;
let sqs: SQSClient;
const queues: string[] = [];
let n = 0;

describe('SqsConsumer on ElasticMQ and PostgreSQL', () => {
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
    await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL, consumer text NOT NULL, key text NOT NULL, version int)`);
    sqs = sqsClient();
  });
  after(async () => {
    await deleteQueues(sqs, queues);
    sqs.destroy();
    await db.close();
  });

  /** A queue with a dead-letter queue and a redrive policy; returns both URLs. */
  async function fresh(fifo: boolean, attributes: Record<string, string> = {}, maxReceiveCount = 5): Promise<{ url: string; dlq: string; name: string }> {
    const dlq = await createQueue(sqs, uniqueQueueName('txbox-c-dlq', fifo));
    const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ['QueueArn'] }));
    const url = await createQueue(sqs, uniqueQueueName('txbox-c', fifo), { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes!.QueueArn, maxReceiveCount }), ...attributes });
    queues.push(url, dlq);
    return { url, dlq, name: `sc-${++n}` };
  }

  const ev = (key: string, version: number, type = 'Changed'): OutboxEvent => ({
    id: uuidv7(),
    type,
    aggregateType: 'Item',
    aggregateId: key,
    key: `Item:${key}`,
    destination: 'items',
    payload: { version },
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date(),
    version,
  });

  function inboxFor(name: string, options: { retry?: { baseDelayMs: number; maxDelayMs: number; maxAttempts: number } } = {}): Inbox {
    return createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: name, ...options });
  }

  function recording(inbox: Inbox, name: string, delayMs = 0): { id: string; key: string }[] {
    const applied: { id: string; key: string }[] = [];
    inbox.on('Changed', async (event, tx) => {
      if (delayMs > 0) await sleep(delayMs);
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
      applied.push({ id: event.id, key: event.key });
    });
    return applied;
  }

  async function effects(name: string): Promise<number> {
    const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE consumer = $1`, [name]);
    return row!.n;
  }

  /** Sends raw, one message per call: the same event may go out several times (a relay re-publishing after a lost ack). */
  async function send(url: string, events: readonly OutboxEvent[]): Promise<void> {
    const fifo = url.endsWith('.fifo');
    for (const [i, e] of events.entries()) {
      const m = encodeSqsMessage(e, fifo);
      await sqs.send(
        new SendMessageCommand({
          QueueUrl: url,
          MessageBody: m.body,
          MessageAttributes: m.attributes,
          ...(fifo ? { MessageGroupId: m.groupId, MessageDeduplicationId: `${m.deduplicationId}-${i}` } : {}),
        }),
      );
    }
  }

  async function counts(url: string): Promise<{ visible: number; inFlight: number }> {
    const { Attributes = {} } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }));
    return { visible: Number(Attributes['ApproximateNumberOfMessages']), inFlight: Number(Attributes['ApproximateNumberOfMessagesNotVisible']) };
  }

  function consumerFor(url: string, extra: Partial<SqsConsumerOptions>): SqsConsumer {
    return new SqsConsumer({ queueUrl: url, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS, destination: 'items', waitTimeSeconds: 1, stopTimeoutMs: 5000, ...extra } as SqsConsumerOptions);
  }

  it('FIFO: events published by SqsTransport are applied once, in per-key order, keys in parallel; deleted after; health is ready', async () => {
    const { url, name } = await fresh(true);
    const inbox = inboxFor(name);
    const applied = recording(inbox, name, 2);
    const transport = new SqsTransport({ queues: { items: url }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS });
    const committed = new Map<string, string[]>();
    await transport.start();
    // As the relay does: at most one event per key per call.
    for (let v = 1; v <= 10; v++) {
      const events = Array.from({ length: 20 }, (_, k) => ev(`k${k}`, v));
      for (const e of events) committed.set(e.key, [...(committed.get(e.key) ?? []), e.id]);
      const outcomes = await transport.publish(events, AbortSignal.timeout(10_000));
      assert.ok(outcomes.every((o) => o.ok), JSON.stringify(outcomes.find((o) => !o.ok)));
    }
    await transport.close();
    const consumer = consumerFor(url, { inbox, concurrency: 8 });
    await consumer.start();
    try {
      const health = await consumer.health();
      assert.equal(health.ready, true, JSON.stringify(health));
      await waitFor('all 200 events applied', () => consumer.stats.processed === 200, 60_000);
      await waitFor('all deleted', () => consumer.stats.deleted === 200);
    } finally {
      await consumer.stop();
    }
    const report = checkDeliveries(committed, applied);
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations, report.phantom], [0, 0, 0, 0]);
    assert.equal(await effects(name), 200);
    assert.deepEqual(await counts(url), { visible: 0, inFlight: 0 });
    assert.equal((await consumer.health()).live, false, 'not live after stop');
  });

  it('a message delivered three times is applied once; the copies are deleted as duplicates', async () => {
    const { url, name } = await fresh(false);
    const inbox = inboxFor(name);
    recording(inbox, name);
    const e = ev('dup', 1);
    await send(url, [e, e, e]);
    const consumer = consumerFor(url, { inbox });
    await consumer.start();
    try {
      await waitFor('three deliveries settled', () => consumer.stats.processed + consumer.stats.duplicate === 3);
      await waitFor('three deleted', () => consumer.stats.deleted === 3);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual([consumer.stats.processed, consumer.stats.duplicate], [1, 2]);
    assert.equal(await effects(name), 1);
  });

  it('deletes only after the commit: a handler waiting to retry at stop() is made visible again, and the next consumer applies it once', async () => {
    const { url, name } = await fresh(true);
    let failing = true;
    const inbox = inboxFor(name, { retry: { baseDelayMs: 60_000, maxDelayMs: 60_000, maxAttempts: 5 } });
    inbox.on('Changed', async (event, tx) => {
      if (failing) throw new Error('not yet');
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
    });
    await send(url, [ev('later', 1)]);
    const first = consumerFor(url, { inbox });
    await first.start();
    await waitFor('the first attempt failed', async () => (await db.query(`SELECT 1 FROM "${db.schema}".inbox WHERE consumer = $1 AND attempts >= 1`, [name])).length === 1);
    assert.deepEqual(await counts(url), { visible: 0, inFlight: 1 }, 'held, not deleted, while the handler has not committed');
    await first.stop();
    // Released once: not made visible before the consumer's own long polls in flight ended (one would take it again).
    assert.deepEqual([first.stats.released, first.stats.deleted, first.stats.processed], [1, 0, 0], 'nothing deleted before a commit');
    failing = false;
    assert.deepEqual(await counts(url), { visible: 1, inFlight: 0 }, 'visible again at once after stop()');
    const second = consumerFor(url, { inbox });
    const receives: number[] = [];
    second.events.on('settled', (e) => receives.push(e.receiveCount));
    await second.start();
    try {
      await waitFor('applied by the second consumer', () => second.stats.processed === 1);
      await waitFor('deleted', () => second.stats.deleted === 1);
    } finally {
      await second.stop();
    }
    assert.equal(await effects(name), 1);
    assert.deepEqual(receives, [2], 'the stop spent one receive of maxReceiveCount, not one per long poll in flight');
  });

  it('a message taken by a consumer that crashed comes back after its visibility timeout and is applied once; one committed before the crash is deleted as a duplicate', async () => {
    const { url, name } = await fresh(false, { VisibilityTimeout: '2' });
    const inbox = inboxFor(name);
    recording(inbox, name);
    const lost = ev('crash', 1);
    const done = ev('crash2', 1);
    await send(url, [lost, done]);
    // The crashed consumer: received both (now invisible), committed `done` through the inbox, deleted neither.
    const taken = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }));
    assert.equal(taken.Messages?.length, 2);
    assert.equal((await inbox.process(done)).status, 'processed');
    const consumer = consumerFor(url, { inbox });
    await consumer.start();
    try {
      await waitFor('both settled after the visibility timeout', () => consumer.stats.processed + consumer.stats.duplicate === 2, 30_000);
      await waitFor('both deleted', () => consumer.stats.deleted === 2);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual([consumer.stats.processed, consumer.stats.duplicate], [1, 1]);
    assert.equal(await effects(name), 2);
  });

  it('a handler slower than the visibility timeout keeps its message: the consumer extends it', { timeout: 60_000 }, async () => {
    const { url, name } = await fresh(false, { VisibilityTimeout: '3' });
    const inbox = inboxFor(name);
    let calls = 0;
    inbox.on('Changed', async (event, tx) => {
      calls++;
      await sleep(7000);
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
    });
    await send(url, [ev('slow', 1)]);
    const consumer = consumerFor(url, { inbox, stopTimeoutMs: 15_000 });
    await consumer.start();
    try {
      await waitFor('applied', () => consumer.stats.processed === 1, 30_000);
    } finally {
      await consumer.stop();
    }
    assert.equal(calls, 1, 'not redelivered while the handler ran');
    assert.ok(consumer.stats.extended >= 1, 'the visibility was extended');
    assert.equal(await effects(name), 1);
  });

  it('a message released at stop on its last receive (maxReceiveCount) is recorded dead in the inbox: the redrive moves it, the inbox keeps it', { timeout: 60_000 }, async () => {
    const { url, name } = await fresh(false, {}, 1);
    const inbox = inboxFor(name);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    inbox.on('Changed', async (event, tx) => {
      if (event.version === 1) await gate; // v2 of the key waits behind it, unhandled
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
    });
    const v1 = ev('last', 1);
    const v2 = ev('last', 2);
    const consumer = consumerFor(url, { inbox, concurrency: 4 });
    await consumer.start();
    await send(url, [v1]);
    await waitFor('v1 received (its handler waits)', () => consumer.stats.received >= 1);
    await send(url, [v2]); // after v1's turn began: the next turn of the key
    await waitFor('v2 received', () => consumer.stats.received >= 2);
    const stopping = consumer.stop();
    open(); // v1 commits; v2's turn comes while stopping: released, on its first and last receive
    await stopping;
    const rows = await db.query<{ event_id: string; status: string; last_error: string | null }>(
      `SELECT event_id, status, last_error FROM "${db.schema}".inbox WHERE consumer = $1 ORDER BY version`,
      [name],
    );
    assert.deepEqual(rows.map((r) => [r.event_id, r.status]), [[v1.id, 'processed'], [v2.id, 'dead']], 'the inbox keeps v2, which SQS will move to the DLQ');
    assert.match(rows[1]!.last_error ?? '', /last delivery.*txbox inbox dead retry/);
  });

  it('a message that arrives while stopping on its last receive (maxReceiveCount) is recorded dead in the inbox before it is made visible again', { timeout: 60_000 }, async () => {
    const { url, name } = await fresh(false, {}, 1);
    const inbox = inboxFor(name);
    recording(inbox, name);
    const consumer = consumerFor(url, { inbox, waitTimeSeconds: 5 });
    await consumer.start();
    await sleep(500); // a long poll is in flight: stop() waits for it
    const stopping = consumer.stop();
    const late = ev('late', 1);
    await send(url, [late]); // the long poll returns it while stopping: released unhandled on its first and last receive
    await stopping;
    assert.equal(consumer.stats.received, 0);
    assert.equal(consumer.stats.released, 1);
    const rows = await db.query<{ event_id: string; status: string; last_error: string | null }>(`SELECT event_id, status, last_error FROM "${db.schema}".inbox WHERE consumer = $1`, [name]);
    assert.deepEqual(rows.map((r) => [r.event_id, r.status]), [[late.id, 'dead']], 'the inbox keeps the event, which SQS will move to the DLQ');
    assert.match(rows[0]!.last_error ?? '', /last delivery.*txbox inbox dead retry/);
    assert.equal(await effects(name), 0);
  });

  it('SQS gone silent (connections open, nothing answers): visibility extensions give up after requestTimeoutMs and never overlap, so they do not take the client\'s connections for good; the consumer goes on once SQS answers', { timeout: 90_000 }, async () => {
    const { url, name } = await fresh(false);
    const inbox = inboxFor(name);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    inbox.on('Changed', async (event, tx) => {
      if (event.aggregateId.startsWith('hold')) await gate;
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
    });
    const proxy = await startTcpProxy(SQS_PORT);
    // Four sockets (the SDK's default is 50): the same exhaustion, sooner.
    const client = new SQSClient({ region: 'us-east-1', endpoint: `http://127.0.0.1:${proxy.port}`, credentials: TEST_CREDENTIALS, maxAttempts: 1, requestHandler: { httpAgent: new Agent({ keepAlive: true, maxSockets: 4 }) } });
    // Visibility 3 s: an extension round every second, two requests a round for 15 held messages.
    const consumer = new SqsConsumer({ queueUrl: url, client, inbox, destination: 'items', waitTimeSeconds: 1, stopTimeoutMs: 5000, concurrency: 32, visibilityTimeoutSeconds: 3, requestTimeoutMs: 1000 });
    // Extension requests in flight (ChangeMessageVisibilityBatch with a timeout above 0; a release sets 0).
    let extending = 0;
    let mostExtending = 0;
    client.middlewareStack.add(
      (next) => async (args) => {
        const entries = (args.input as { Entries?: { VisibilityTimeout?: number }[] }).Entries ?? [];
        if (!entries.some((e) => (e.VisibilityTimeout ?? 0) > 0)) return next(args);
        mostExtending = Math.max(mostExtending, ++extending);
        try {
          return await next(args);
        } finally {
          extending--;
        }
      },
      { step: 'initialize', name: 'countExtensions' },
    );
    let extendErrors = 0;
    consumer.events.on('error', (e) => void (e.operation === 'extend' && extendErrors++));
    await consumer.start();
    try {
      await send(url, Array.from({ length: 15 }, (_, i) => ev(`hold${i}`, 1)));
      await waitFor('15 held and extended once', () => consumer.stats.received === 15 && consumer.stats.extended >= 15, 20_000).catch((err: Error) => {
        throw new Error(`${err.message}; consumer stats ${JSON.stringify(consumer.stats)}`);
      });
      proxy.hold();
      proxy.silence();
      await sleep(4500); // four extension rounds due during the silence
      proxy.silence(); // the connections made meanwhile stay black holes for good, as after a lost NAT state
      proxy.release();
      assert.ok(extendErrors >= 2, `the extensions gave up after requestTimeoutMs and said so (${extendErrors} extend errors)`);
      assert.ok(mostExtending <= 2, `one round at a time: 15 held messages are two requests (${mostExtending} in flight at once)`);
      open();
      await send(url, [ev('after', 1)]);
      await waitFor('all 16 applied once SQS answers again', () => consumer.stats.processed === 16, 30_000).catch((err: Error) => {
        throw new Error(`${err.message}; consumer stats ${JSON.stringify(consumer.stats)}`);
      });
    } finally {
      open();
      await consumer.stop();
      client.destroy();
      await proxy.close();
    }
    assert.equal(await effects(name), 16);
  });

  it('a poison message is left to the redrive policy: SQS moves it to the DLQ after maxReceiveCount, while other messages flow', { timeout: 60_000 }, async () => {
    const { url, dlq, name } = await fresh(false, { VisibilityTimeout: '1' }, 2);
    const inbox = inboxFor(name);
    recording(inbox, name);
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: 'not json, no envelope' }));
    await send(url, [ev('fine', 1)]);
    const consumer = consumerFor(url, { inbox });
    await consumer.start();
    try {
      await waitFor('the poison message is in the DLQ', async () => (await counts(dlq)).visible === 1, 30_000);
      await waitFor('the good one applied', () => consumer.stats.processed === 1);
    } finally {
      await consumer.stop();
    }
    assert.ok(consumer.stats.rejected >= 2, `received and rejected at least maxReceiveCount times (${consumer.stats.rejected})`);
    assert.deepEqual(await counts(url), { visible: 0, inFlight: 0 });
  });

  it('without deadLetterQueueUrl, an event dead in the inbox is deleted at once (the inbox keeps it, retriable) and its FIFO group flows on', { timeout: 60_000 }, async () => {
    const { url, dlq, name } = await fresh(true, { VisibilityTimeout: '60' }, 2);
    const inbox = inboxFor(name, { retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 } });
    inbox.on('Changed', async (e, tx) => {
      if (e.aggregateId === 'dead') throw new Error('always fails');
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key) VALUES ($1, $2, $3)`, [e.id, name, e.key]);
    });
    const doomed = ev('dead', 1);
    const next = { ...ev('dead', 2), aggregateId: 'after', id: uuidv7() };
    await send(url, [doomed, next]); // one key, one FIFO group: the second waits for the first
    const consumer = consumerFor(url, { inbox });
    await consumer.start();
    try {
      await waitFor('the next event of its group applied', async () => (await effects(name)) === 1, 20_000);
      await waitFor('both deleted', async () => (await counts(url)).inFlight === 0 && (await counts(url)).visible === 0, 10_000);
    } finally {
      await consumer.stop();
    }
    const [row] = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`, [name, doomed.id]);
    assert.equal(row?.status, 'dead', 'the inbox keeps it, for txbox inbox retry');
    assert.equal(consumer.stats.dead, 1);
    assert.deepEqual(await counts(dlq), { visible: 0, inFlight: 0 }, 'not copied: the inbox is where it is kept');
  });

  it('without deadLetterQueueUrl, an event the inbox store refuses to record is never deleted: the redrive policy moves it to the DLQ', { timeout: 60_000 }, async () => {
    const { url, dlq, name } = await fresh(false, { VisibilityTimeout: '1' }, 2);
    // PostgreSQL refuses the inbox's own row for this type (a constraint someone added): dead, and no row keeps it.
    const refusal = await refuseInboxRows(db, "type = 'Refused'");
    try {
      const inbox = inboxFor(name, { retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 } });
      inbox.on('Refused', async () => {});
      const refused = ev('refused', 1, 'Refused');
      await send(url, [refused]);
      const consumer = consumerFor(url, { inbox });
      await consumer.start();
      try {
        await waitFor('the refused event is in the DLQ', async () => (await counts(dlq)).visible === 1, 30_000);
      } finally {
        await consumer.stop();
      }
      assert.ok(consumer.stats.dead >= 1, 'dead in the inbox, unrecorded');
      const rows = await db.query(`SELECT 1 FROM "${db.schema}".inbox WHERE consumer = $1`, [name]);
      assert.equal(rows.length, 0, 'no inbox row keeps it: only the DLQ does');
    } finally {
      await refusal.allow();
    }
  });

  it('with deadLetterQueueUrl, an unreadable message and a dead event are copied there with the reason and deleted', async () => {
    const { url, dlq, name } = await fresh(true);
    const inbox = inboxFor(name, { retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 } });
    inbox.on('Changed', async () => {
      throw new Error('always fails');
    });
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: '{}', MessageGroupId: 'g', MessageDeduplicationId: uuidv7() }));
    await send(url, [ev('dead', 1)]);
    const consumer = consumerFor(url, { inbox, deadLetterQueueUrl: dlq });
    const deadLettered: (string | null)[] = [];
    consumer.events.on('deadLettered', (e) => deadLettered.push(e.id));
    await consumer.start();
    try {
      await waitFor('both dead-lettered', () => deadLettered.length === 2, 30_000);
      await waitFor('both deleted', () => consumer.stats.deleted === 2);
    } finally {
      await consumer.stop();
    }
    const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], WaitTimeSeconds: 1 }));
    assert.deepEqual([consumer.stats.dead, consumer.stats.rejected], [1, 1], 'one dead in the inbox, one unreadable');
    const reasons = (got.Messages ?? []).map((m) => m.MessageAttributes?.['txbox-dead-reason']?.StringValue ?? '').sort();
    assert.equal(reasons.length, 2);
    assert.match(reasons.join('\n'), /handler failed 2 times: .*always fails/);
    assert.match(reasons.join('\n'), /unreadable message: .*txbox-envelope/);
    assert.deepEqual(await counts(url), { visible: 0, inFlight: 0 });
  });

  it('an event the inbox can never store (its id is not a UUID) goes to txbox\'s dead-letter queue, and the next event of its key flows', async () => {
    const { url, dlq, name } = await fresh(true);
    const inbox = inboxFor(name);
    const applied = recording(inbox, name);
    const bad = encodeSqsMessage({ ...ev('odd', 1), id: 'not-a-uuid' }, true);
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: bad.body, MessageAttributes: bad.attributes, MessageGroupId: bad.groupId, MessageDeduplicationId: 'bad-1' }));
    await send(url, [ev('odd', 2)]);
    const consumer = consumerFor(url, { inbox, deadLetterQueueUrl: dlq });
    await consumer.start();
    try {
      await waitFor('the good one applied', () => applied.length === 1, 30_000);
      await waitFor('both deleted', () => consumer.stats.deleted === 2);
    } finally {
      await consumer.stop();
    }
    assert.equal(consumer.stats.dead + consumer.stats.rejected >= 1, true);
    const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], WaitTimeSeconds: 1 }));
    assert.equal(got.Messages?.length, 1);
    assert.match(got.Messages![0]!.MessageAttributes?.['txbox-dead-reason']?.StringValue ?? '', /id/);
  });

  it('worker mode: messages are stored in the inbox queue and deleted; workers apply them once in per-key order', async () => {
    const { url, name } = await fresh(true);
    const inbox = inboxFor(name);
    await runWorkerModeScenario({
      db,
      inbox,
      applied: recording(inbox, name),
      keys: 6,
      versions: 5,
      redeliver: 6,
      event: ev,
      send: (events) => send(url, [...events]),
      receive: async (queue, messages) => {
        const consumer = consumerFor(url, { queue, batch: 20 });
        await consumer.start();
        try {
          await waitFor('all messages queued', () => consumer.stats.queued === messages);
          await waitFor('all deleted', () => consumer.stats.deleted === messages);
        } finally {
          await consumer.stop();
        }
      },
    });
  });

  it('an outage (connections cut, new ones refused) is retried with backoff: health goes not ready, then it recovers by itself and applies what arrived', async () => {
    const { url, name } = await fresh(false);
    const inbox = inboxFor(name);
    const applied = recording(inbox, name);
    const proxy = new CuttableProxy(SQS_PORT);
    await proxy.open();
    const viaProxy = queueUrl(url.split('/').at(-1)!, proxy.port);
    const errors: string[] = [];
    const consumer = consumerFor(viaProxy, { inbox, endpoint: `http://127.0.0.1:${proxy.port}`, requestTimeoutMs: 2000 });
    consumer.events.on('error', (e) => errors.push(e.operation));
    await consumer.start();
    try {
      await proxy.cut();
      await waitFor('a receive failed', () => errors.includes('receive'), 30_000);
      await waitFor('not ready during the outage', async () => !(await consumer.health()).ready);
      await send(url, [ev('after', 1)]);
      await proxy.open();
      await waitFor('applied after the outage', () => applied.length === 1, 60_000);
      await waitFor('ready again', async () => (await consumer.health()).ready);
    } finally {
      await consumer.stop();
      await proxy.cut();
    }
    assert.equal(await effects(name), 1);
  });

  it('start() names the setting: a missing queue, a queue without redrive policy, an unreachable endpoint', async () => {
    const inbox = inboxFor('sc-errors');
    const plain = await createQueue(sqs, uniqueQueueName('txbox-c-plain', false));
    queues.push(plain);
    const cases: [SqsConsumer, RegExp][] = [
      [consumerFor(`${SQS_ENDPOINT}/000000000000/${uniqueQueueName('txbox-missing', false)}`, { inbox }), /^queueUrl: .*does not exist/],
      [consumerFor(plain, { inbox }), /^deadLetterQueueUrl: .*no RedrivePolicy/],
    ];
    for (const [consumer, expected] of cases) {
      await assert.rejects(consumer.start(), (err: unknown) => err instanceof ConfigError && expected.test(err.message));
      assert.equal((await consumer.health()).live, false);
    }
    // Nothing answers at the endpoint: an outage; start() keeps trying, naming endpoint.
    assert.match(await startWhileUnreachable(consumerFor(plain, { inbox, endpoint: 'http://127.0.0.1:1', requestTimeoutMs: 3000 })), /endpoint: /);
  });
});
