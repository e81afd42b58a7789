/**
 * Inbox.processInOrder on PostgreSQL: a key's run of events commits in one
 * group-commit transaction with other keys' events, handlers in order; a
 * handler failure stops the run (the later events resolve with the same
 * retry and never run); a store failure stops it the same way (the later
 * events reject with the same error and never reach the store).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type InboxStore, type OutboxEvent } from 'txbox';
import { applyVersioned, inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';

let db: TestDb;
let n = 0;

const ev = (key: string, version: number): OutboxEvent => ({
  id: uuidv7(),
  type: 'Changed',
  aggregateType: 'Item',
  aggregateId: key,
  key: `Item:${key}`,
  destination: 'items',
  payload: { version },
  headers: {},
  occurredAt: new Date(),
  version,
});

/** The PostgreSQL store with its runBatch calls counted (events per call); `fail` makes a call (and recording the failure) throw instead: an outage. */
function counting(fail: (events: readonly OutboxEvent[]) => boolean = () => false): { store: InboxStore; calls: string[][] } {
  const inner = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
  const calls: string[][] = [];
  const store: InboxStore = {
    runBatch: async (consumer, events, handler, options) => {
      calls.push(events.map((e) => `${e.key}/${e.version}`));
      if (fail(events)) throw new Error('connection terminated');
      return inner.runBatch(consumer, events, handler, options);
    },
    recordFailure: async (consumer, event, ...a) => {
      if (fail([event])) throw new Error('connection terminated');
      return inner.recordFailure(consumer, event, ...a);
    },
    hold: (...a) => inner.hold(...a),
    recheckHeld: (...a) => inner.recheckHeld(...a),
    redrivable: (...a) => inner.redrivable(...a),
  };
  return { store, calls };
}

async function statuses(consumer: string): Promise<Map<string, string>> {
  const rows = await db.query<{ event_id: string; status: string }>(`SELECT event_id::text, status FROM "${db.schema}".inbox WHERE consumer = $1`, [consumer]);
  return new Map(rows.map((r) => [r.event_id, r.status]));
}

describe('Inbox.processInOrder on PostgreSQL', () => {
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    await db.query(`CREATE TABLE "${db.schema}".item_view (item text PRIMARY KEY, version bigint NOT NULL)`);
  });
  after(async () => {
    await db.close();
  });

  it("a key's run commits in one transaction with another key's event, its handlers in order", async () => {
    const { store, calls } = counting();
    const inbox = createInbox({ store, consumer: `o-${++n}` });
    const ran: string[] = [];
    inbox.on('Changed', async (e) => void ran.push(`${e.key}/${e.version}`));
    const run = [ev('a', 1), ev('a', 2), ev('a', 3)];
    const outcomes = inbox.processInOrder(run);
    const other = inbox.process(ev('b', 1));
    assert.deepEqual((await Promise.all(outcomes)).map((o) => o.status), ['processed', 'processed', 'processed']);
    assert.equal((await other).status, 'processed');
    assert.deepEqual(calls, [['Item:a/1', 'Item:a/2', 'Item:a/3', 'Item:b/1']], 'one transaction');
    assert.deepEqual(ran.filter((r) => r.startsWith('Item:a')), ['Item:a/1', 'Item:a/2', 'Item:a/3']);
    // Delivered again: duplicates, in one transaction.
    assert.deepEqual((await Promise.all(inbox.processInOrder(run))).map((o) => o.status), ['duplicate', 'duplicate', 'duplicate']);
    await inbox.stop();
  });

  it('a run longer than batch.maxSize is not split across two transactions', async () => {
    const { store, calls } = counting();
    const inbox = createInbox({ store, consumer: `o-${++n}`, batch: { maxSize: 2 } });
    inbox.on('Changed', async () => {});
    const first = inbox.process(ev('c', 1));
    const run = inbox.processInOrder([ev('d', 1), ev('d', 2), ev('d', 3)]);
    await Promise.all([first, ...run]);
    assert.deepEqual(calls, [['Item:c/1'], ['Item:d/1', 'Item:d/2', 'Item:d/3']]);
    await inbox.stop();
  });

  it('a handler failure stops the run: the later events resolve with the same retry and never run; another key goes on', async () => {
    const { store } = counting();
    const consumer = `o-${++n}`;
    const inbox = createInbox({ store, consumer, retry: { maxAttempts: 5, baseDelayMs: 1000, maxDelayMs: 1000 } });
    const ran: string[] = [];
    inbox.on('Changed', async (e) => {
      ran.push(`${e.key}/${e.version}`);
      if (e.key === 'Item:e' && e.version === 2) throw new Error('boom');
    });
    const run = [ev('e', 1), ev('e', 2), ev('e', 3)];
    const outcomes = await Promise.all(inbox.processInOrder(run));
    const other = await inbox.process(ev('f', 1));
    assert.deepEqual(outcomes.map((o) => o.status), ['processed', 'retry', 'retry']);
    assert.equal(other.status, 'processed');
    assert.ok(!ran.includes('Item:e/3'), `e/3 must not run before e/2 succeeded: ${ran.join(', ')}`);
    const rows = await statuses(consumer);
    assert.equal(rows.get(run[0]!.id), 'processed');
    assert.equal(rows.get(run[1]!.id), 'failed');
    assert.equal(rows.has(run[2]!.id), false, 'e/3 left no row');
    await inbox.stop();
  });

  it('a store failure stops the run: the later events reject with the same error without reaching the store', async () => {
    // The group transaction fails, then the first event alone (and recording its failure): the run's other events are not tried.
    const { store, calls } = counting((events) => events.some((e) => e.key === 'Item:g' && e.version === 1));
    const inbox = createInbox({ store, consumer: `o-${++n}` });
    inbox.on('Changed', async () => {});
    const outcomes = await Promise.allSettled(inbox.processInOrder([ev('g', 1), ev('g', 2), ev('g', 3)]));
    assert.deepEqual(outcomes.map((o) => o.status), ['rejected', 'rejected', 'rejected']);
    for (const o of outcomes) assert.match(String((o as PromiseRejectedResult).reason), /connection terminated/);
    assert.deepEqual(calls, [['Item:g/1', 'Item:g/2', 'Item:g/3'], ['Item:g/1']]);
    await inbox.stop();
  });
  it("an event held for a version gap keeps the batch's other events in one transaction (holds in savepoints), not one transaction each", async () => {
    // Consumers with competing receivers (NATS, RabbitMQ, Pub/Sub) see gaps all the time; one transaction per event
    // whenever a batch held one collapsed their throughput under load.
    const { store, calls } = counting();
    const consumer = `o-${++n}`;
    const inbox = createInbox({ store, consumer });
    inbox.on('Changed', async (e, tx) => {
      await applyVersioned(tx, { table: `${db.schema}.item_view`, id: { item: e.key }, version: e.version!, values: {}, onGap: 'hold' });
    });
    const held = ev('h', 2); // h/1 has not arrived yet
    const others = [ev('i', 1), ev('j', 1), ev('k', 1), ev('l', 1)];
    const outcomes = await Promise.all([held, ...others].map((e) => inbox.process(e)));
    assert.deepEqual(outcomes.map((o) => o.status), ['held', 'processed', 'processed', 'processed', 'processed']);
    assert.deepEqual(calls, [
      ['Item:h/2', 'Item:i/1', 'Item:j/1', 'Item:k/1', 'Item:l/1'],
      ['Item:h/2', 'Item:i/1', 'Item:j/1', 'Item:k/1', 'Item:l/1'],
    ], 'the batch again with the hold in a savepoint');
    const rows = await statuses(consumer);
    assert.equal(rows.get(held.id), 'held');
    for (const e of others) assert.equal(rows.get(e.id), 'processed');
    // The missing version arrives: the held one runs after it.
    calls.length = 0;
    assert.equal((await inbox.process(ev('h', 1))).status, 'processed');
    assert.equal((await statuses(consumer)).get(held.id), 'processed');
    const view = await db.query<{ version: string }>(`SELECT version FROM "${db.schema}".item_view WHERE item = 'Item:h'`);
    assert.equal(Number(view[0]!.version), 2);
    await inbox.stop();
  });
});
