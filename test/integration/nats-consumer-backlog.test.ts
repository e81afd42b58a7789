/**
 * NatsConsumer with a backlog (the real nats-server on 127.0.0.1:4222 and
 * the real PostgreSQL): a slow key keeps the process at its in-process
 * limit for longer than ack_wait. Every message the server handed to the
 * process must stay the process's (its ack deadline extended) until it is
 * settled: a message left waiting unextended is redelivered, each time
 * counted as a delivery though its handler never ran, and at maxDeliveries
 * it was dead-lettered unhandled (the inbox never saw it, and with version
 * holds every later version of its key waited for good).
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createInbox } from 'txbox';
import { NatsConsumer, type NatsConsumerEvents } from 'txbox/nats';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { JetStreamAdmin, item, publishAll, sleep } from '../fixtures/nats-consumer-helpers.ts';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

let db: TestDb;
let admin: JetStreamAdmin;

before(async () => {
  db = await openDb('postgres', { migrate: false });
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (seq bigserial PRIMARY KEY, event_id uuid NOT NULL, n int NOT NULL)`);
  admin = await JetStreamAdmin.open();
});
after(async () => {
  await admin.close();
  await db.close();
});

it('a slow key never costs a delivery: what the process received waits extended, and nothing is dead-lettered unhandled', { timeout: 120_000 }, async () => {
  const s = await admin.streams();
  try {
    const events = Array.from({ length: 40 }, (_, i) => item('slow', i + 1));
    const transport = s.transport();
    await transport.start();
    await publishAll(transport, [events]);
    await transport.close();

    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'backlog' });
    inbox.on('ItemChanged', async (event, tx) => {
      await sleep(120); // 40 events of one key, one at a time: about 5 s, five times ack_wait
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, n) VALUES ($1, $2)`, [event.id, (event.payload as { n: number }).n]);
    });
    // In-process limit batch + concurrency = 6: the rest of a pull (up to 5 more) waits longer than ack_wait.
    const consumer = new NatsConsumer({ stream: s.stream, durable: 'backlog', inbox, batch: 5, concurrency: 1, ackWaitMs: 1000, maxDeliveries: 2 });
    const dead: NatsConsumerEvents['deadLettered'][] = [];
    const settled: NatsConsumerEvents['settled'][] = [];
    consumer.events.on('deadLettered', (e) => dead.push(e));
    consumer.events.on('settled', (e) => settled.push(e));
    await consumer.start();
    try {
      await waitFor('40 messages settled or dead-lettered', () => settled.length + dead.length >= 40, 60_000, 50);
      await waitFor('every message acked', async () => {
        const info = await s.consumer('backlog');
        return info !== null && info.num_ack_pending === 0 && info.num_pending === 0;
      });
    } finally {
      await consumer.stop();
    }
    assert.deepEqual(dead, [], 'nothing dead-lettered');
    const applied = await db.query<{ n: number }>(`SELECT n FROM "${db.schema}".effects ORDER BY seq`);
    assert.deepEqual(
      applied.map((r) => r.n),
      events.map((_, i) => i + 1),
      'every event applied once, in order',
    );
    assert.deepEqual(
      settled.filter((e) => e.deliveryCount !== 1).map((e) => `#${e.seq} delivered ${e.deliveryCount} times`),
      [],
      'no message delivered twice: no crash, no stop',
    );
  } finally {
    await s.delete();
  }
});
