/**
 * RabbitMqConsumer against the real RabbitMQ on 127.0.0.1:5672 and the real
 * PostgreSQL: per-key order with keys in parallel, redeliveries applied once,
 * poison events and unreadable messages dead-lettered while other keys flow,
 * a broker restart while consuming, a queue deleted under the consumer,
 * worker mode, a graceful stop, and start()'s configuration errors.
 * (kill -9 between commit and ack: rabbitmq-consumer-crash.test.ts.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, InboxQueue, createInbox, createInboxWorker, type Inbox, type Logger, type RetryOptions, type SqlExecutor } from 'txbox';
import { PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, inboxNames, migrateInbox, migratePostgres, postgresNames } from 'txbox/postgres';
import { RabbitMqConsumer, type RabbitMqConsumerOptions } from 'txbox/rabbitmq';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { AMQP_URL, TestBroker, assertNoOpenHandles, itemEvent, itemWaves, lockBroker, rabbitmqctl } from '../fixtures/rabbitmq-consumer-broker.ts';
import { startWhileUnreachable } from '../helpers/outage.ts';

let unlock: () => Promise<void>;
let db: TestDb;
const broker = new TestBroker();
const consumers: RabbitMqConsumer[] = [];
let consumerNo = 0;

interface Applied {
  readonly id: string;
  readonly key: string;
}

/** An inbox whose `ItemChanged` handler records the effect in `effects` (and in `applied`, in commit order per key). */
function itemInbox(options: { retry?: RetryOptions; before?: (key: string, tx: SqlExecutor) => Promise<void> } = {}): { inbox: Inbox; applied: Applied[]; consumer: string } {
  const consumer = `c${++consumerNo}`;
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer, ...(options.retry ? { retry: options.retry } : {}) });
  const applied: Applied[] = [];
  inbox.on('ItemChanged', async (event, tx) => {
    await options.before?.(event.key, tx);
    await tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id, key) VALUES ($1, $2, $3)`, [consumer, event.id, event.key]);
    applied.push({ id: event.id, key: event.key });
  });
  return { inbox, applied, consumer };
}

function consumer(options: Partial<RabbitMqConsumerOptions> & Pick<RabbitMqConsumerOptions, 'queues'>): RabbitMqConsumer {
  const c = new RabbitMqConsumer({ url: AMQP_URL, reconnectInitialDelayMs: 100, reconnectMaxDelayMs: 500, stopTimeoutMs: 10_000, ...options });
  consumers.push(c);
  return c;
}

async function effects(consumerName: string): Promise<Applied[]> {
  return db.query<Applied>(`SELECT event_id AS id, key FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY seq`, [consumerName]);
}

function recordingLogger(): Logger & { lines: { level: string; obj: object; msg: string }[] } {
  const lines: { level: string; obj: object; msg: string }[] = [];
  const at = (level: string) => (obj: object, msg?: string) => void lines.push({ level, obj, msg: msg ?? '' });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

describe('RabbitMqConsumer against RabbitMQ and PostgreSQL', { timeout: 300_000 }, () => {
  before(async () => {
    unlock = await lockBroker();
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
    await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, consumer text NOT NULL, event_id uuid NOT NULL, key text NOT NULL)`);
  });
  after(async () => {
    try {
      await Promise.allSettled(consumers.map((c) => c.stop()));
      await broker.cleanup();
      await db.close();
    } finally {
      await unlock();
    }
    await assertNoOpenHandles();
  });

  it('applies each event once, in per-key order, with different keys in parallel; acks everything', async () => {
    const q = await broker.queue();
    const { waves, committed, all } = itemWaves(q, 40, 15);
    await broker.publish(...waves);
    const running = new Set<string>();
    let overlap = 0;
    let parallel = 0;
    const { inbox, applied, consumer: name } = itemInbox({
      before: async (key) => {
        if (running.has(key)) overlap++;
        running.add(key);
        parallel = Math.max(parallel, running.size);
        await sleep(2);
        running.delete(key);
      },
    });
    const c = consumer({ queues: [q], inbox, prefetch: 32 });
    await c.start();
    await waitFor('every event settled', () => c.stats.processed === all.length, 60_000);
    await c.stop();
    const report = checkDeliveries(committed, await effects(name));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations, report.phantom], [0, 0, 0, 0]);
    assert.equal(applied.length, all.length);
    assert.equal(overlap, 0, 'one key never runs twice at once');
    assert.ok(parallel > 1, `different keys ran in parallel (at most ${parallel} at once)`);
    assert.ok(parallel <= 32, 'concurrency is bounded by prefetch');
    assert.equal(c.stats.acked, all.length);
    assert.equal(await broker.ready(q), 0, 'all acked: nothing requeued at close');
  });

  it('the same message delivered three times is applied once and acked three times', async () => {
    const q = await broker.queue();
    const e = itemEvent(q, 'dup', 1);
    await broker.publish([e], [e], [e]);
    const { inbox, consumer: name } = itemInbox();
    const c = consumer({ queues: q, inbox });
    const statuses: string[] = [];
    c.events.on('settled', (s) => statuses.push(s.status));
    await c.start();
    await waitFor('three settled', () => statuses.length === 3);
    await c.stop();
    assert.deepEqual(statuses, ['processed', 'duplicate', 'duplicate']);
    assert.equal((await effects(name)).length, 1);
    assert.equal(c.stats.acked, 3);
    assert.equal(await broker.ready(q), 0);
  });

  it('a poison event is dead-lettered after maxAttempts (DLX queue, inbox row dead) while other keys keep flowing; an unreadable message is rejected to the DLX', async () => {
    const q = await broker.queue(false);
    const { inbox, applied, consumer: name } = itemInbox({
      retry: { baseDelayMs: 300, maxDelayMs: 2000, maxAttempts: 4 },
      before: async (key) => {
        if (key === 'Item:poison') throw new Error('poison: cannot apply');
      },
    });
    const logger = recordingLogger();
    const c = consumer({ queues: [q], inbox, assertQueues: true, logger });
    const flowed: number[] = [];
    let deadAt = 0;
    c.events.on('settled', (s) => s.status === 'processed' && flowed.push(Date.now()));
    c.events.on('dead-lettered', () => (deadAt = Date.now()));
    await c.start(); // declares q with x-dead-letter-exchange q.dlx, and q.dead bound to it
    const poison = itemEvent(q, 'poison', 1);
    const { waves, committed, all } = itemWaves(q, 10, 5);
    await broker.publish([poison], ...waves);
    await (await broker.channel()).sendToQueue(q, Buffer.from('{"secret": "payload"}'), { messageId: 'not-an-event-1', persistent: true });
    await waitFor('the poison event dead', () => deadAt > 0 && c.stats.processed === all.length, 30_000);
    await c.stop();

    assert.ok(Math.max(...flowed) < deadAt, 'every other key finished while the poison event was still retrying');
    assert.deepEqual(checkDeliveries(committed, applied).orderViolations, 0);
    const [row] = await db.query<{ status: string; attempts: number; last_error: string }>(
      `SELECT status, attempts, last_error FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`,
      [name, poison.id],
    );
    assert.deepEqual([row?.status, row?.attempts], ['dead', 4]);
    assert.match(row!.last_error, /poison: cannot apply/);
    await waitFor('both dead letters routed', async () => (await broker.ready(`${q}.dead`)) === 2);
    const dead = await broker.drain(`${q}.dead`);
    assert.deepEqual(dead.map((m) => m.properties.messageId).sort(), [poison.id, 'not-an-event-1'].sort());
    const deaths = dead[0]!.properties.headers?.['x-death'] as { reason: string; queue: string }[];
    assert.deepEqual([deaths[0]?.reason, deaths[0]?.queue], ['rejected', q]);
    assert.equal(c.stats.rejected, 1);
    assert.equal(c.stats.dead, 1);
    const warned = logger.lines.find((l) => /unreadable message/.test(l.msg));
    assert.equal((warned?.obj as { messageId?: string }).messageId, 'not-an-event-1', 'the rejected message id is logged');
    assert.doesNotMatch(JSON.stringify(logger.lines), /secret|guest:guest/, 'no payload, no credentials in logs');
    assert.equal(await broker.ready(q), 0);
  });

  it('keeps consuming across a broker restart (stop_app/start_app): nothing lost, nothing applied twice, order kept', async () => {
    const q = await broker.queue();
    const { waves, committed, all } = itemWaves(q, 30, 20);
    await broker.publish(...waves);
    let gate: Promise<void> | null = null;
    let open: () => void = () => {};
    const { inbox, consumer: name } = itemInbox({
      before: async () => {
        if (gate) await gate;
      },
    });
    const c = consumer({ queues: [q], inbox, prefetch: 32 });
    let disconnected = false;
    let resumed = false;
    c.events.on('disconnected', () => (disconnected = true));
    c.events.on('subscribed', (s) => (resumed ||= s.resumed));
    c.events.on('settled', () => {
      // A third of the way through, hold the handlers in progress: they commit only after the broker went down, so their acks are lost.
      if (c.stats.processed === 200 && gate === null) gate = new Promise<void>((resolve) => (open = resolve));
    });
    await c.start();
    await waitFor('a third processed', () => gate !== null, 30_000);
    try {
      await rabbitmqctl('stop_app');
      await waitFor('the consumer to notice', () => disconnected, 15_000);
      open();
      await sleep(300); // the held handlers commit while the broker is down
    } finally {
      open();
      await rabbitmqctl('start_app');
    }
    await waitFor('every event processed', () => c.stats.processed === all.length, 90_000);
    await waitFor('the redelivered ones skipped', async () => (await broker.ready(q)) === 0 && c.inFlight === 0, 30_000);
    await c.stop();
    assert.ok(resumed, 'consumption resumed on a new connection');
    assert.ok(c.stats.released > 0 && c.stats.duplicate > 0, `acks lost with the broker were redelivered and skipped (released ${c.stats.released}, duplicate ${c.stats.duplicate})`);
    const report = checkDeliveries(committed, await effects(name));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
    assert.equal(await broker.ready(q), 0);
  });

  it('a channel error (406 from the broker) while consuming: a new channel resumes, redelivered messages that committed are skipped', async () => {
    const q = await broker.queue();
    const { waves, committed, all } = itemWaves(q, 10, 10, 'ch');
    await broker.publish(...waves);
    let gate: Promise<void> | null = null;
    let open: () => void = () => {};
    const { inbox, consumer: name } = itemInbox({
      before: async () => {
        if (gate) await gate;
      },
    });
    const connectionName = `${broker.prefix}-channel-error`;
    const c = consumer({ queues: [q], inbox, prefetch: 16, connectionName });
    const closed: { code: number | null; reason: string }[] = [];
    let resumed = false;
    c.events.on('channel-closed', (e) => closed.push(e));
    c.events.on('subscribed', (s) => (resumed ||= s.resumed));
    c.events.on('settled', () => {
      if (c.stats.processed === 30 && gate === null) gate = new Promise<void>((resolve) => (open = resolve));
    });
    await c.start();
    await waitFor('some processed', () => gate !== null);
    try {
      // The broker closes a channel that acks an unknown delivery tag: make it do so to the consumer's channel only.
      await rabbitmqctl(
        'eval',
        `[rabbit_channel:do(P, {'basic.ack', 999999, false}) || P <- rabbit_channel:list(), [{connection, C}] <- [rabbit_channel:info(P, [connection])],
          [{client_properties, Props}] <- [rabbit_reader:info(C, [client_properties])], lists:member({<<"connection_name">>, longstr, <<"${connectionName}">>}, Props)].`,
      );
      await waitFor('the channel closed', () => closed.length === 1);
    } finally {
      open();
    }
    await waitFor('every event processed', () => c.stats.processed === all.length, 30_000);
    await waitFor('the redelivered ones skipped', async () => (await broker.ready(q)) === 0 && c.inFlight === 0);
    await c.stop();
    assert.equal(closed[0]!.code, 406);
    assert.match(closed[0]!.reason, /unknown delivery tag 999999/);
    assert.ok(resumed, 'consuming again on a new channel');
    assert.ok(c.stats.duplicate > 0, 'messages whose ack went down with the channel came back and were skipped');
    const report = checkDeliveries(committed, await effects(name));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
  });

  it('a queue deleted while consumed (broker cancel) is consumed again once re-created; other queues keep flowing', async () => {
    const [q1, q2] = [await broker.queue(), await broker.queue()];
    const { inbox, consumer: name } = itemInbox();
    const c = consumer({ queues: [q1, q2], inbox });
    const cancelled: string[] = [];
    c.events.on('cancelled', (e) => cancelled.push(e.queue));
    await c.start();
    await (await broker.channel()).deleteQueue(q1);
    await waitFor('the cancel', () => cancelled.length === 1);
    await broker.publish([itemEvent(q2, 'other', 1)]);
    await waitFor('q2 still consumed', () => c.stats.processed === 1);
    await (await broker.channel()).assertQueue(q1, { durable: true });
    await broker.publish([itemEvent(q1, 'back', 1)]);
    await waitFor('q1 consumed again', () => c.stats.processed === 2, 15_000);
    await c.stop();
    assert.deepEqual(cancelled, [q1]);
    assert.equal((await effects(name)).length, 2);
  });

  it('worker mode (queue): stores each message in the inbox queue and acks; workers apply them once in key order', async () => {
    const q = await broker.queue();
    const { waves, committed, all } = itemWaves(q, 20, 10, 'w');
    await broker.publish(...waves, all.slice(0, 20)); // and 20 redeliveries
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const c = consumer({ queues: [q], queue });
    await c.start();
    await waitFor('all stored', () => c.stats.queued === all.length + 20, 30_000);
    await c.stop();
    assert.equal(await broker.ready(q), 0, 'acked after storing');
    const [stored] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox_queue`);
    assert.equal(stored!.n, all.length, 'a redelivered id is stored once');

    const { inbox, consumer: name } = itemInbox();
    const worker = createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30 });
    await worker.start();
    try {
      await waitFor('all applied', async () => (await effects(name)).length >= all.length, 60_000);
    } finally {
      await worker.stop();
    }
    const report = checkDeliveries(committed, await effects(name));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0]);
  });

  it('stop() lets the handler in progress commit and ack; messages not started stay in the queue', async () => {
    const q = await broker.queue();
    let started = 0;
    const { inbox, consumer: name } = itemInbox({
      before: async () => {
        started++;
        await sleep(400);
      },
    });
    const [first, second] = [itemEvent(q, 'slow', 1), itemEvent(q, 'slow', 2)];
    await broker.publish([first], [second]);
    const c = consumer({ queues: [q], inbox });
    await c.start();
    await waitFor('the first handler running', () => started === 1);
    await c.stop();
    assert.deepEqual((await effects(name)).map((e) => e.id), [first.id], 'the running handler committed');
    assert.equal(c.stats.acked, 1);
    const left = await broker.drain(q);
    assert.deepEqual(left.map((m) => m.properties.messageId), [second.id], 'the waiting message went back to the queue');
  });

  it('start() names the setting to fix: a missing queue (queues), a refused login or an unreachable broker (url), never the password', async () => {
    const { inbox } = itemInbox();
    const missing = await broker.queue(false);
    await assert.rejects(consumer({ queues: [missing], inbox }).start(), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.field, 'queues');
      assert.match(err.message, new RegExp(`queue "${missing}" does not exist at amqp://127\\.0\\.0\\.1:5672/.*assertQueues`));
      return true;
    });
    await assert.rejects(consumer({ url: 'amqp://guest:wrong-s3cret@127.0.0.1:5672', queues: ['x'], inbox }).start(), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.field, 'url');
      assert.match(err.message, /refused the login of user "guest"/);
      assert.doesNotMatch(err.message, /wrong-s3cret/);
      return true;
    });
    // Nothing answers at url: an outage; start() keeps trying, naming url, never the password.
    const waiting = await startWhileUnreachable(consumer({ url: 'amqp://guest:s3cret@127.0.0.1:1', queues: ['x'], inbox, connectTimeoutMs: 2000 }));
    assert.match(waiting, /url: cannot connect to RabbitMQ at amqp:\/\/127\.0\.0\.1:1\//);
    assert.doesNotMatch(waiting, /s3cret/);
    assert.throws(() => consumer({ queues: ['x'] }), { field: 'inbox' });
    assert.throws(() => consumer({ queues: [], inbox }), { field: 'queues' });
    assert.throws(() => consumer({ queues: ['x'], inbox, prefetch: 4, concurrency: 8 }), { field: 'concurrency' });
    assert.throws(() => consumer({ url: 'http://127.0.0.1', queues: ['x'], inbox }), { field: 'url' });
  });
});
