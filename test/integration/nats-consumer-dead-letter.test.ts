/**
 * NatsConsumer dead letters against the real nats-server on 127.0.0.1:4222
 * and PostgreSQL: a poison handler is retried in place (its key waits, other
 * keys flow) and dead-lettered after the inbox's attempts; a message
 * delivered `maxDeliveries` times is dead-lettered without running the
 * handler again, and recorded dead in the inbox, where an operator's retry
 * runs it and releases the versions its key held behind it. The copy keeps
 * the envelope and says why.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createInbox, InboxQueue, type OutboxEvent, type RetryOptions } from 'txbox';
import { NatsConsumer, parseNatsMessage, type NatsConsumerEvents } from 'txbox/nats';
import { applyVersioned, inboxNames, migrateInbox, migratePostgres, PostgresInboxAdmin, PostgresInboxStore, PostgresOutboxStore, postgresNames } from 'txbox/postgres';
import { AckPolicy, DeliverPolicy, jetstream, type JsMsg } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { checkDeliveries } from 'txbox/testing';
import { JetStreamAdmin, item, itemRounds, publishAll, type TestStreams } from '../fixtures/nats-consumer-helpers.ts';
import { openDb, refuseInboxRows, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

let db: TestDb;
let admin: JetStreamAdmin;
let s: TestStreams;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, at double precision NOT NULL)`);
  admin = await JetStreamAdmin.open();
});
after(async () => {
  await admin.close();
  await db.close();
});

/**
 * An inbox whose handler throws for events with `poison: true`. `calls`
 * counts every run of the handler (with the inbox's group commit, a failing
 * event runs once in its group and once alone), `failures` the attempts the
 * inbox recorded.
 */
function poisonInbox(consumer: string, retry: RetryOptions) {
  const calls = new Map<string, number>();
  const failures = new Map<string, number>();
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer, retry });
  inbox.events.on('failed', (f) => failures.set(f.id, f.attempts));
  inbox.on('ItemChanged', async (event, tx) => {
    calls.set(event.id, (calls.get(event.id) ?? 0) + 1);
    if ((event.payload as { poison?: boolean }).poison) throw new Error('poison: this item cannot be applied');
    await tx.query(`INSERT INTO "${db.schema}".effects (event_id, key, at) VALUES ($1, $2, $3)`, [event.id, event.key, Date.now()]);
  });
  return { inbox, calls, failures };
}

async function deadLetters(): Promise<{ id: string; headers: Record<string, string> }[]> {
  const info = await admin.jsm.streams.info(s.deadStream);
  const out: { id: string; headers: Record<string, string> }[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await admin.jsm.streams.getMessage(s.deadStream, { seq });
    if (!m) continue;
    const parsed = parseNatsMessage({ subject: m.subject, data: m.data, headers: m.header });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    const headers: Record<string, string> = {};
    for (const k of m.header.keys()) headers[k] = m.header.get(k);
    out.push({ id: parsed.event.id, headers });
  }
  return out;
}

/**
 * Publishes v1 and v2 of one key, creates `durable` (max_deliver 3, ack_wait 1 s) and plays other processes of it
 * that held them and died: v2 delivered twice (its next delivery is its last, the 3rd), v1 once. v1 is free again
 * when this returns, v2 only once its ack_wait ends: a consumer then gets v1 first, v2 behind it on its last delivery.
 */
async function lastDeliveryBehindKey(durable: string, v1: OutboxEvent, v2: OutboxEvent): Promise<void> {
  const transport = s.transport();
  await transport.start();
  await publishAll(transport, [[v1], [v2]]);
  await transport.close();
  await admin.jsm.consumers.add(s.stream, { durable_name: durable, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All, ack_wait: nanos(1000), max_deliver: 3, max_ack_pending: 1000 });
  const raw = await jetstream(admin.nc).consumers.get(s.stream, durable);
  const take = async (max: number): Promise<JsMsg[]> => {
    const out: JsMsg[] = [];
    for await (const m of await raw.fetch({ max_messages: max, expires: 3000 })) if (out.push(m) === max) break;
    return out;
  };
  const [m1, first2] = await take(2);
  assert.deepEqual([m1?.seq, first2?.seq], [1, 2]);
  const keep = setInterval(() => m1!.working(), 200);
  try {
    await new Promise((r) => setTimeout(r, 1500));
    const [again2] = await take(1);
    assert.deepEqual([again2?.seq, again2?.info.deliveryCount], [2, 2]);
  } finally {
    clearInterval(keep);
  }
  m1!.nak();
}

it('a poison handler is retried in place and dead-lettered after the inbox attempts, while other keys keep flowing', { timeout: 90_000 }, async () => {
  s = await admin.streams();
  try {
    const poison = item('poison', 1, { poison: true });
    const after = item('poison', 2);
    const { rounds, committed } = itemRounds('ok', 10, 5);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[poison], [after], ...rounds]);
    await transport.close();
    committed.set(after.key, [after.id]);

    // Three attempts, 0.75-1.5 s apart: the poison key is held for at least 1.5 s.
    const { inbox, failures } = poisonInbox('poison', { baseDelayMs: 1500, maxDelayMs: 1500, maxAttempts: 3 });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'poison', inbox, concurrency: 8, ackWaitMs: 2000 });
    const dead: (NatsConsumerEvents['deadLettered'] & { at: number })[] = [];
    consumer.events.on('deadLettered', (e) => dead.push({ ...e, at: Date.now() }));
    await consumer.start();
    try {
      await waitFor('the poison dead-lettered and the rest applied', async () => dead.length === 1 && (await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length === 51, 60_000, 50);
      // Past ack_wait: a terminated message is not delivered again.
      await new Promise((r) => setTimeout(r, 2500));
      assert.equal(consumer.stats.received, 52);
      assert.equal((await s.consumer('poison'))?.num_ack_pending, 0);
    } finally {
      await consumer.stop();
    }
    assert.equal(failures.get(poison.id), 3, 'the handler failed maxAttempts times');
    assert.equal(dead[0]!.id, poison.id);
    assert.equal(dead[0]!.deliveryCount, 1, 'retried in place, never redelivered');
    const rows = await db.query<{ id: string; key: string; at: number }>(`SELECT event_id AS id, key, at FROM "${db.schema}".effects ORDER BY seq`);
    const others = rows.filter((r) => r.key !== after.key);
    assert.ok(
      others.every((r) => r.at < dead[0]!.at),
      'every other key was applied while the poison key was held',
    );
    assert.ok(rows.find((r) => r.id === after.id)!.at >= dead[0]!.at, "the poison key's next event ran after the dead letter");
    const report = checkDeliveries(committed, rows);
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0], JSON.stringify(report));

    const letters = await deadLetters();
    assert.equal(letters.length, 1);
    assert.equal(letters[0]!.id, poison.id, 'the copy parses back into the envelope');
    assert.match(letters[0]!.headers['txbox-dead-reason']!, /poison: this item cannot be applied/);
    assert.equal(letters[0]!.headers['txbox-dead-stream'], s.stream);
    assert.equal(letters[0]!.headers['txbox-dead-consumer'], 'poison');
    assert.equal(letters[0]!.headers['txbox-dead-subject'], `${s.subjectPrefix}.items`);
    const [row] = await db.query<{ status: string; attempts: number }>(`SELECT status, attempts FROM "${db.schema}".inbox WHERE event_id = $1`, [poison.id]);
    assert.deepEqual(row, { status: 'dead', attempts: 3 });
  } finally {
    await s.delete();
  }
});

it('a message delivered maxDeliveries times is dead-lettered without running the handler again', { timeout: 60_000 }, async () => {
  s = await admin.streams();
  try {
    const poison = item('p', 1, { poison: true });
    const fine = item('q', 1);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[poison, fine]]);
    await transport.close();

    // A long retry delay: the first process is still waiting to retry when it stops, and releases the message.
    const { inbox, calls, failures } = poisonInbox('deliveries', { baseDelayMs: 20_000, maxDelayMs: 20_000 });
    const options = { stream: s.stream, durable: 'deliveries', inbox, maxDeliveries: 2, ackWaitMs: 2000 };
    const first = new NatsConsumer(options);
    const released: string[] = [];
    first.events.on('released', (e) => released.push(e.id));
    await first.start();
    await waitFor('the poison failed once and the other was applied', () => failures.get(poison.id) === 1 && first.stats.processed === 1, 30_000);
    await first.stop();
    const runs = calls.get(poison.id);
    assert.deepEqual(released, [poison.id], 'stop() released the waiting message: JetStream delivers it again after ack_wait');

    const second = new NatsConsumer(options);
    const dead: NatsConsumerEvents['deadLettered'][] = [];
    second.events.on('deadLettered', (e) => dead.push(e));
    await second.start();
    try {
      await waitFor('the redelivery dead-lettered', () => dead.length === 1, 30_000);
      await waitFor('every message acked', async () => (await s.consumer('deliveries'))?.num_ack_pending === 0);
    } finally {
      await second.stop();
    }
    assert.equal(calls.get(poison.id), runs, 'the handler did not run on the last delivery');
    assert.equal(failures.get(poison.id), 2, 'one failed attempt, then recorded dead when the consumer gave up on it');
    assert.equal(dead[0]!.deliveryCount, 2);
    assert.match(dead[0]!.reason, /delivered 2 times without an ack \(maxDeliveries 2\)/);
    const [row] = await db.query<{ status: string; last_error: string }>(`SELECT status, last_error FROM "${db.schema}".inbox WHERE event_id = $1`, [poison.id]);
    assert.equal(row?.status, 'dead');
    assert.match(row!.last_error, /delivered 2 times without an ack \(maxDeliveries 2\)/);
    const letters = await deadLetters();
    assert.equal(letters.length, 1);
    assert.equal(letters[0]!.headers['txbox-dead-deliveries'], '2');
  } finally {
    await s.delete();
  }
});

it('a message given up on unhandled is recorded dead in the inbox: an operator retry runs it and releases the versions held behind it', { timeout: 60_000 }, async () => {
  s = await admin.streams();
  try {
    await db.query(`CREATE TABLE "${db.schema}".gaveup_view (key text PRIMARY KEY, version bigint NOT NULL)`);
    const v = [1, 2, 3].map((n) => item('gaveup', n));
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[v[0]!]]);
    // Another process of the durable takes version 1 and dies holding it: JetStream counts the delivery.
    await admin.jsm.consumers.add(s.stream, { durable_name: 'gaveup', ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All, ack_wait: nanos(1000), max_deliver: 2, max_ack_pending: 1000 });
    const taken = await (await jetstream(admin.nc).consumers.get(s.stream, 'gaveup')).next({ expires: 5000 });
    assert.equal(taken?.seq, 1);
    await publishAll(transport, [[v[1]!], [v[2]!]]);
    await transport.close();

    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'gaveup', autoStart: false });
    const applied: number[] = [];
    inbox.on('ItemChanged', async (event, tx) => {
      const r = await applyVersioned(tx, { table: `${db.schema}.gaveup_view`, id: { key: event.key }, version: event.version!, values: {}, onGap: 'hold' });
      if (r.status === 'applied') applied.push(event.version!);
    });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'gaveup', inbox, maxDeliveries: 2, ackWaitMs: 1000 });
    const dead: NatsConsumerEvents['deadLettered'][] = [];
    consumer.events.on('deadLettered', (e) => dead.push(e));
    await consumer.start();
    try {
      await waitFor('version 1 given up on', () => dead.length === 1, 30_000);
      await waitFor('every message acked', async () => (await s.consumer('gaveup'))?.num_ack_pending === 0);
    } finally {
      await consumer.stop();
    }
    assert.equal(dead[0]!.id, v[0]!.id);
    const statuses = async (): Promise<string[]> =>
      (await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = 'gaveup' ORDER BY version`)).map((r) => r.status);
    assert.deepEqual(await statuses(), ['dead', 'held', 'held'], 'version 1 is dead in the inbox, 2 and 3 wait behind it');
    assert.deepEqual(applied, []);

    const inboxAdmin = new PostgresInboxAdmin(db.connection, { schema: db.schema });
    assert.deepEqual(await inboxAdmin.retryDead({ ids: [v[0]!.id] }, 'test'), [v[0]!.id]);
    await inbox.redrive();
    await waitFor('the held versions released', async () => (await statuses()).every((st) => st === 'processed'), 15_000);
    assert.deepEqual(applied, [1, 2, 3]);
    const [view] = await db.query<{ version: string }>(`SELECT version FROM "${db.schema}".gaveup_view`);
    assert.equal(Number(view!.version), 3);
  } finally {
    await s.delete();
  }
});

it('a last delivery behind a released message of its key is recorded dead, not released (JetStream would never deliver it again)', { timeout: 60_000 }, async () => {
  s = await admin.streams();
  try {
    const v1 = item('lastkey', 1, { poison: true });
    const v2 = item('lastkey', 2);
    await lastDeliveryBehindKey('lastdel', v1, v2);

    // v1 (2nd delivery) fails and waits 20 s to retry: stop() releases it, and with it its key; v2, on its last delivery, waits behind it.
    const { inbox, calls } = poisonInbox('lastdel', { baseDelayMs: 20_000, maxDelayMs: 20_000 });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'lastdel', inbox, maxDeliveries: 3, ackWaitMs: 1000, concurrency: 4 });
    const released: string[] = [];
    consumer.events.on('released', (e) => released.push(e.id));
    await consumer.start();
    await waitFor('both received, v1 handled', () => consumer.stats.received === 2 && calls.get(v1.id) !== undefined, 20_000);
    await consumer.stop();
    assert.deepEqual(released, [v1.id], 'only v1 released: v2 was on its last delivery');
    const rows = await db.query<{ id: string; status: string; last_error: string }>(`SELECT event_id AS id, status, last_error FROM "${db.schema}".inbox WHERE consumer = 'lastdel'`);
    const row2 = rows.find((r) => r.id === v2.id);
    assert.equal(row2?.status, 'dead', `v2 recorded dead; rows: ${JSON.stringify(rows)}`);
    assert.match(row2!.last_error, /delivered 3 times without an ack \(maxDeliveries 3\)/);
  } finally {
    await s.delete();
  }
});

it('without a dead-letter subject, an event the inbox store refuses to record is left for redelivery, never terminated: applied once the refusal ends', { timeout: 90_000 }, async () => {
  s = await admin.streams();
  // PostgreSQL refuses the inbox's own row for this key (a constraint someone added): dead, and no row keeps it.
  const refusal = await refuseInboxRows(db, "key = 'Item:refused'");
  try {
    const refused = item('refused', 1);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[refused]]);
    await transport.close();
    const { inbox } = poisonInbox('refusing', { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'refusing', inbox, deadLetterSubject: null, ackWaitMs: 1000 });
    const terminated: string[] = [];
    consumer.events.on('deadLettered', (e) => terminated.push(e.id));
    await consumer.start();
    try {
      await waitFor('dead unrecorded, left for redelivery', () => consumer.stats.released >= 1 || terminated.length > 0, 30_000);
      assert.deepEqual(terminated, [], 'not terminated without a copy');
      await refusal.allow();
      await waitFor('applied once the store takes it', async () => (await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = 'refusing'`))[0]?.status === 'processed', 30_000).catch((err: Error) => {
        throw new Error(`${err.message}; consumer stats ${JSON.stringify(consumer.stats)}`);
      });
    } finally {
      await consumer.stop();
    }
  } finally {
    await refusal.allow();
    await s.delete();
  }
});

it('a message on its last delivery still queued behind its key when stop() runs out of time is recorded dead in the inbox (JetStream will not deliver it again)', { timeout: 60_000 }, async () => {
  s = await admin.streams();
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  try {
    const v1 = item('stopkey', 1);
    const v2 = item('stopkey', 2);
    await lastDeliveryBehindKey('stopdel', v1, v2);

    // v1 (2nd delivery) is handled and holds past stopTimeoutMs; v2, on its last delivery, waits behind it and is released at the deadline.
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'stopdel' });
    let started = false;
    inbox.on('ItemChanged', async (event) => {
      if (event.id === v1.id) {
        started = true;
        await gate;
      }
    });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'stopdel', inbox, maxDeliveries: 3, ackWaitMs: 1000, concurrency: 4, stopTimeoutMs: 1000 });
    await consumer.start();
    await waitFor('both received, v1 handled', () => consumer.stats.received === 2 && started, 20_000);
    await consumer.stop();
    const rows = await db.query<{ id: string; status: string; last_error: string }>(`SELECT event_id AS id, status, last_error FROM "${db.schema}".inbox WHERE consumer = 'stopdel'`);
    const row2 = rows.find((r) => r.id === v2.id);
    assert.equal(row2?.status, 'dead', `v2 recorded dead; rows: ${JSON.stringify(rows)}`);
    assert.match(row2!.last_error, /released unhandled on its last delivery/);
  } finally {
    open();
    await s.delete();
  }
});

it('worker mode without a dead-letter subject: a message on its last delivery is stored in the queue, not terminated without a copy', { timeout: 60_000 }, async () => {
  s = await admin.streams();
  try {
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'last_queue' }));
    const last = item('lastq', 1);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[last]]);
    await transport.close();
    // Another process of the durable took it and died: its next delivery is the last (max_deliver 2).
    await admin.jsm.consumers.add(s.stream, { durable_name: 'lastq', ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All, ack_wait: nanos(1000), max_deliver: 2, max_ack_pending: 1000 });
    const raw = await jetstream(admin.nc).consumers.get(s.stream, 'lastq');
    for await (const m of await raw.fetch({ max_messages: 1, expires: 3000 })) assert.equal(m.info.deliveryCount, 1);
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'last_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'lastq', queue, deadLetterSubject: null, maxDeliveries: 2, ackWaitMs: 1000 });
    await consumer.start();
    try {
      await waitFor('stored in the queue on its last delivery', async () => (await db.query(`SELECT 1 FROM "${db.schema}".last_queue WHERE id = $1`, [last.id])).length === 1, 20_000);
    } finally {
      await consumer.stop();
    }
    assert.equal(consumer.stats.queued, 1);
  } finally {
    await s.delete();
  }
});
