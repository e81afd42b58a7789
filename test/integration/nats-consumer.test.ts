/**
 * NatsConsumer against the real nats-server on 127.0.0.1:4222 and the real
 * PostgreSQL: events published with NatsTransport are applied once in
 * per-key order while keys run in parallel; one event id stored three times
 * is applied once; worker mode only queues and acks; start() names the
 * setting when the stream, the dead-letter stream or the server is wrong.
 * Each test uses its own streams and durable and deletes them.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, it } from 'node:test';
import { jetstream } from '@nats-io/jetstream';
import { ConfigError, createInbox, createInboxWorker, InboxQueue, type OutboxEvent } from 'txbox';
import { NatsConsumer, type NatsConsumerEvents } from 'txbox/nats';
import { inboxNames, migrateInbox, migratePostgres, PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, postgresNames } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { JetStreamAdmin, item, itemRounds, publishAll, sleep, type TestStreams } from '../fixtures/nats-consumer-helpers.ts';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { startWhileUnreachable } from '../helpers/outage.ts';

let db: TestDb;
let admin: JetStreamAdmin;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
  await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, consumer text NOT NULL)`);
  admin = await JetStreamAdmin.open();
});
after(async () => {
  await admin.close();
  await db.close();
});

function inboxFor(consumer: string, onHandle?: (event: OutboxEvent) => Promise<void>) {
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer });
  inbox.on('ItemChanged', async (event, tx) => {
    await onHandle?.(event);
    await tx.query(`INSERT INTO "${db.schema}".effects (event_id, key, consumer) VALUES ($1, $2, $3)`, [event.id, event.key, consumer]);
  });
  return inbox;
}

async function effects(consumer: string): Promise<{ id: string; key: string }[]> {
  return db.query<{ id: string; key: string }>(`SELECT event_id AS id, key FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY seq`, [consumer]);
}

async function withStreams(fn: (s: TestStreams) => Promise<void>, options?: { duplicateWindowMs?: number }): Promise<void> {
  const s = await admin.streams(options);
  try {
    await fn(s);
  } finally {
    await s.delete();
  }
}

it('applies events published with NatsTransport once, in per-key order, with keys in parallel', { timeout: 120_000 }, () =>
  withStreams(async (s) => {
    const { rounds, committed } = itemRounds('order', 20, 15);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, rounds);
    await transport.close();

    const inbox = inboxFor('ordered', () => sleep(Math.floor(Math.random() * 3)));
    // Keys in parallel: how many events the consumer has handed to the inbox at once (the inbox may group them in one transaction).
    let running = 0;
    let maxRunning = 0;
    const processOne = inbox.process.bind(inbox);
    inbox.process = async (event) => {
      maxRunning = Math.max(maxRunning, ++running);
      try {
        return await processOne(event);
      } finally {
        running--;
      }
    };
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'ordered', inbox, concurrency: 8, batch: 50 });
    const settled: NatsConsumerEvents['settled'][] = [];
    consumer.events.on('settled', (e) => settled.push(e));
    await consumer.start();
    try {
      await waitFor('300 events applied', async () => (await effects('ordered')).length >= 300, 60_000, 100);
      await waitFor('every message acked', async () => {
        const info = await s.consumer('ordered');
        return info !== null && info.num_ack_pending === 0 && info.num_pending === 0;
      });
    } finally {
      await consumer.stop();
    }
    const report = checkDeliveries(committed, await effects('ordered'));
    assert.deepEqual([report.lost, report.duplicates, report.phantom, report.orderViolations], [0, 0, 0, 0], JSON.stringify(report));
    assert.ok(maxRunning > 1, `events of different keys were in the inbox at once (at most ${maxRunning})`);
    assert.equal(settled.length, 300);
    assert.ok(settled.every((e) => e.status === 'processed' && e.deliveryCount === 1));
    const info = await s.consumer('ordered');
    assert.equal(info?.config.ack_policy, 'explicit');
    assert.equal(info?.config.max_deliver, 12);
    assert.equal(consumer.inFlight, 0);
  }),
);

it('applies one event id stored three times in the stream once, and acks every copy', { timeout: 60_000 }, () =>
  withStreams(
    async (s) => {
      const e = item('dup', 1);
      const other = item('other', 1);
      const transport = s.transport();
      await transport.start();
      for (let i = 0; i < 3; i++) {
        // Past the 200 ms duplicate window, so the stream stores each copy: a relay re-publish after the window.
        await publishAll(transport, [[e]]);
        await sleep(300);
      }
      await publishAll(transport, [[other]]);
      await transport.close();
      assert.equal((await admin.jsm.streams.info(s.stream)).state.messages, 4, 'the stream holds three copies');

      const consumer = new NatsConsumer({ stream: s.stream, durable: 'dedup', inbox: inboxFor('dedup') });
      await consumer.start();
      try {
        await waitFor('all four copies settled', () => consumer.stats.processed + consumer.stats.duplicate >= 4, 30_000);
        await waitFor('every message acked', async () => (await s.consumer('dedup'))?.num_ack_pending === 0);
      } finally {
        await consumer.stop();
      }
      assert.deepEqual((await effects('dedup')).map((r) => r.id).sort(), [e.id, other.id].sort());
      assert.deepEqual([consumer.stats.processed, consumer.stats.duplicate], [2, 2]);
    },
    { duplicateWindowMs: 200 },
  ),
);

it('worker mode: only stores in the inbox queue and acks; workers then apply once in per-key order', { timeout: 120_000 }, () =>
  withStreams(async (s) => {
    const { rounds, committed } = itemRounds('w', 10, 10);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, rounds);
    await transport.close();

    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const inbox = inboxFor('queued');
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'queued', queue, batch: 30 });
    await consumer.start();
    try {
      await waitFor('100 events queued', () => consumer.stats.queued >= 100, 30_000);
      await waitFor('every message acked', async () => (await s.consumer('queued'))?.num_ack_pending === 0);
    } finally {
      await consumer.stop();
    }
    assert.equal((await effects('queued')).length, 0, 'the consumer ran no handler');
    const [queuedRows] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox_queue`);
    assert.equal(queuedRows!.n, 100);

    const workers = [0, 1].map(() =>
      createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30, leaseTtlMs: 3000 }),
    );
    for (const w of workers) await w.start();
    try {
      await waitFor('all handled', async () => (await effects('queued')).length >= 100, 60_000, 100);
    } finally {
      for (const w of workers) await w.stop();
    }
    const report = checkDeliveries(committed, await effects('queued'));
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations], [0, 0, 0], JSON.stringify(report));
  }),
);

it('stop() stops pulling and lets the running handlers commit and ack before it resolves', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[item('slow1', 1), item('slow2', 1)]]);
    await transport.close();
    let started = 0;
    const inbox = inboxFor('graceful', async () => {
      started++;
      await sleep(800);
    });
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'graceful', inbox, concurrency: 2 });
    await consumer.start();
    await waitFor('both handlers running', () => started === 2);
    const stopping = consumer.stop();
    // Published after stop(): must stay in the stream for the next start.
    const late = s.transport();
    await late.start();
    await publishAll(late, [[item('late', 1)]]);
    await late.close();
    await stopping;
    assert.equal(consumer.stats.processed, 2, 'both finished');
    assert.equal((await effects('graceful')).length, 2);
    const info = await s.consumer('graceful');
    assert.equal(info?.num_ack_pending, 0, 'both acked before stop() resolved');
    assert.equal(info?.num_pending, 1, 'nothing pulled after stop()');
  }),
);

it('terminates an unreadable message (logged by sequence, counted) and goes on with the rest', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const js = jetstream(admin.nc);
    await js.publish(`${s.subjectPrefix}.items`, 'not a txbox message', { msgID: 'foreign-1' });
    const e = item('after-foreign', 1);
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [[e]]);
    await transport.close();
    const warnings: Record<string, unknown>[] = [];
    const logger = { debug() {}, info() {}, error() {}, warn: (o: object) => void warnings.push(o as Record<string, unknown>) };
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'foreign', inbox: inboxFor('foreign'), logger });
    const rejected: NatsConsumerEvents['rejected'][] = [];
    consumer.events.on('rejected', (r) => rejected.push(r));
    await consumer.start();
    try {
      await waitFor('the event applied', async () => (await effects('foreign')).length === 1);
      await waitFor('both settled on the server', async () => (await s.consumer('foreign'))?.num_ack_pending === 0);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual(rejected, [{ seq: 1, msgId: 'foreign-1', reason: 'the message has no txbox-type header' }]);
    assert.equal(consumer.stats.rejected, 1);
    assert.ok(warnings.some((w) => w.seq === 1 && w.msgId === 'foreign-1'), 'the log names its sequence and id');
  }),
);

/** Publishes raw HPUB frames (other clients send header names nats.js refuses to read), then PINGs to know they arrived. */
async function publishRawHeaders(subject: string, frames: readonly string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const socket = net.connect(4222, '127.0.0.1');
    socket.once('data', () => {
      let out = 'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n';
      for (const h of frames) out += `HPUB ${subject} ${Buffer.byteLength(h)} ${Buffer.byteLength(h) + 2}\r\n${h}{}\r\n`;
      socket.write(`${out}PING\r\n`);
      socket.on('data', (d) => {
        if (d.toString().includes('PONG')) socket.end(resolve);
      });
    });
    socket.on('error', reject);
  });
}

it('terminates a message whose headers nats.js cannot read (a name with a space) and applies the messages of its key around it', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const id = (n: number) => `0190a8f0-0000-7000-8000-${String(n).padStart(12, '0')}`;
    const frame = (n: number, extra = '') => `NATS/1.0\r\nNats-Msg-Id: ${id(n)}\r\ntxbox-type: ItemChanged\r\ntxbox-key: raw\r\n${extra}\r\n`;
    await publishRawHeaders(`${s.subjectPrefix}.items`, [frame(1), frame(99, 'Bad Name: x\r\n'), frame(2), frame(3)]);
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'badheader', inbox: inboxFor('badheader'), ackWaitMs: 1000, maxDeliveries: 3 });
    const rejected: NatsConsumerEvents['rejected'][] = [];
    consumer.events.on('rejected', (r) => rejected.push(r));
    await consumer.start();
    try {
      await waitFor('the three readable events applied', async () => (await effects('badheader')).length === 3, 20_000);
      await waitFor('all four settled on the server', async () => (await s.consumer('badheader'))?.num_ack_pending === 0);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual((await effects('badheader')).map((e) => e.id), [id(1), id(2), id(3)]);
    assert.equal(rejected.length, 1);
    assert.equal(rejected[0]!.seq, 2);
    assert.match(rejected[0]!.reason, /headers cannot be read/);
  }),
);

it('creates the durable from the options and updates it when they change', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const inbox = inboxFor('durable');
    const first = new NatsConsumer({ stream: s.stream, durable: 'durable', inbox, filterSubjects: `${s.subjectPrefix}.items`, ackWaitMs: 5000, maxDeliveries: 4, maxAckPending: 50 });
    await first.start();
    await first.stop();
    let info = await s.consumer('durable');
    assert.deepEqual(
      [info?.config.ack_policy, info?.config.ack_wait, info?.config.max_deliver, info?.config.max_ack_pending, info?.config.filter_subject, info?.config.deliver_subject],
      ['explicit', 5_000_000_000, 4, 50, `${s.subjectPrefix}.items`, undefined],
    );
    const second = new NatsConsumer({ stream: s.stream, durable: 'durable', inbox, filterSubjects: `${s.subjectPrefix}.items`, ackWaitMs: 7000, maxDeliveries: 6 });
    await second.start();
    await second.stop();
    info = await s.consumer('durable');
    assert.deepEqual([info?.config.ack_wait, info?.config.max_deliver, info?.config.max_ack_pending], [7_000_000_000, 6, 1000]);
  }),
);

it('creates the durable again when it is deleted under a running consumer; the inbox skips what it saw', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'recreated', inbox: inboxFor('recreated'), ackWaitMs: 4000 });
    await consumer.start();
    const transport = s.transport();
    await transport.start();
    try {
      await publishAll(transport, [[item('re', 1)]]);
      await waitFor('the first event applied', async () => (await effects('recreated')).length === 1);
      await admin.jsm.consumers.delete(s.stream, 'recreated');
      await publishAll(transport, [[item('re', 2)]]);
      await waitFor('the second event applied', async () => (await effects('recreated')).length === 2, 30_000);
      await waitFor('both acked on the new durable', async () => (await s.consumer('recreated'))?.num_ack_pending === 0);
    } finally {
      await transport.close();
      await consumer.stop();
    }
    assert.ok(consumer.stats.duplicate >= 1, 'the new durable started from the first message, which the inbox skipped');
  }),
);

it('start() names the setting: a missing stream, no dead-letter stream, a dead-letter subject the stream itself captures, an unreachable server', { timeout: 60_000 }, () =>
  withStreams(async (s) => {
    const inbox = inboxFor('config');
    const cases: [ConstructorParameters<typeof NatsConsumer>[0], string, RegExp][] = [
      [{ stream: 'TXBOX_NC_NO_SUCH_STREAM', durable: 'config', inbox }, 'stream', /no JetStream stream named "TXBOX_NC_NO_SUCH_STREAM" at 127\.0\.0\.1:4222/],
      [{ stream: s.stream, durable: 'config', inbox, deadLetterSubject: 'txbox-nowhere.dead' }, 'deadLetterSubject', /no stream .* captures txbox-nowhere\.dead/],
      [{ stream: s.stream, durable: 'config', inbox, deadLetterSubject: `${s.subjectPrefix}.dead` }, 'deadLetterSubject', /captured by .*the stream being consumed/],
    ];
    for (const [options, field, text] of cases) {
      const consumer = new NatsConsumer(options);
      await assert.rejects(consumer.start(), (err: unknown) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.equal(err.field, field, err.message);
        assert.match(err.message, text);
        assert.doesNotMatch(err.message, /secret-password/);
        return true;
      });
      await consumer.stop();
    }
    // Nothing answers at servers: an outage; start() keeps trying, naming servers, never the password.
    const waiting = await startWhileUnreachable(new NatsConsumer({ servers: 'nats://txbox:secret-password@127.0.0.1:1', stream: s.stream, durable: 'config', inbox, connectTimeoutMs: 2000 }));
    assert.match(waiting, /servers: cannot connect to NATS at nats:\/\/127\.0\.0\.1:1/);
    assert.doesNotMatch(waiting, /secret-password/);
    assert.throws(() => new NatsConsumer({ stream: s.stream, durable: 'bad.name', inbox }), (e: unknown) => e instanceof ConfigError && e.field === 'durable');
    assert.throws(() => new NatsConsumer({ stream: s.stream, durable: 'x', inbox, filterSubjects: ['a.>.b'] }), (e: unknown) => e instanceof ConfigError && e.field === 'filterSubjects[0]');
    assert.throws(() => new NatsConsumer({ stream: s.stream, durable: 'x' }), (e: unknown) => e instanceof ConfigError && e.field === 'inbox');
    assert.equal(await s.consumer('config'), null, 'no durable was created by a failed start');
  }),
);
