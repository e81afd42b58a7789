/**
 * A rebalance while events flow: consumer A reads a 6-partition topic, B
 * joins the group (partitions move to it), then leaves (they move back).
 * Every event is applied exactly once (effects counted per id) and each key's
 * versions are applied in order. In-flight records finish and are committed
 * before a process gives its partitions up, so the new owner finds nothing to
 * redo: no delivery is even seen twice.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, it } from 'node:test';
import { createInbox, type Inbox } from 'txbox';
import { KafkaConsumer } from 'txbox/kafka';
import { inboxNames, migrateInbox, PostgresInboxStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { applied, assertNoOpenHandles, BROKERS, checkApplied, createEffects, FAST_GROUP, itemEvents, newGroup, newTopic, publish, setUpKafka, uncommitted } from '../fixtures/kafka-consumer-helpers.ts';

let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await createEffects(db);
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

/** One process of the service: its own inbox instance on the shared table, its handler a little slow so that records are in flight when partitions move. */
function processInbox(by: string): Inbox {
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'rebalance' });
  inbox.on('Changed', async (event, tx) => {
    await sleep(3);
    await tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id, key, version, applied_by) VALUES ('rebalance', $1, $2, $3, $4)`, [event.id, event.key, event.version, by]);
  });
  return inbox;
}

it('a consumer joining and leaving while events flow: every event applied exactly once, per-key order intact', { timeout: 180_000 }, async () => {
  const topic = await newTopic(6);
  const groupId = newGroup();
  const options = { brokers: BROKERS, groupId, topics: [topic], fromBeginning: true, ...FAST_GROUP };
  const a = new KafkaConsumer({ ...options, inbox: processInbox('a') });
  const b = new KafkaConsumer({ ...options, inbox: processInbox('b'), keyConcurrency: 3 });
  const bSettled = (): number => b.stats.processed + b.stats.duplicate;
  const events = itemEvents(40, 40);
  let published = 0;
  await a.start();
  const publishing = (async () => {
    // 40 waves of one event per key, spread over the whole rebalance dance.
    for (let i = 0; i < events.length; i += 40) {
      await publish(topic, events.slice(i, i + 40));
      published += 40;
      await sleep(200);
    }
  })();
  try {
    await waitFor('A applied some', async () => (await applied(db, 'rebalance')).length >= 200, 30_000);
    await b.start(); // resolves after the group rebalanced: A gave partitions up, B got some
    assert.ok((b.assignment[topic] ?? []).length > 0, `partitions moved to B: ${JSON.stringify(b.assignment)}`);
    await waitFor('A synced the new assignment', () => (a.assignment[topic] ?? []).length + (b.assignment[topic] ?? []).length === 6, 10_000);
    await waitFor('B applied some while events flow', () => bSettled() >= 100, 30_000);
    assert.ok(published < events.length, 'B joined while events were still being published');
    await b.stop(); // B finishes and commits its in-flight records, leaves; A takes its partitions back
    const movedBack = published;
    await publishing;
    assert.ok(movedBack < events.length, 'B left while events were still being published');
    await waitFor('all applied', async () => (await applied(db, 'rebalance')).length >= events.length, 60_000);
    await waitFor('every offset committed', async () => (await uncommitted(topic, groupId)) === 0, 15_000);
    assert.deepEqual([...(a.assignment[topic] ?? [])].sort(), [0, 1, 2, 3, 4, 5], 'A owns every partition again');
  } finally {
    await publishing.catch(() => {});
    await b.stop();
    await a.stop();
  }
  const rows = await applied(db, 'rebalance');
  const counts = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects GROUP BY event_id HAVING count(*) <> 1`);
  assert.equal(counts.length, 0, 'no event applied twice');
  assert.equal(new Set(rows.map((r) => r.id)).size, events.length, 'no event lost');
  assert.deepEqual(checkApplied(rows), { duplicates: 0, outOfOrder: 0 });
  const byB = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE applied_by = 'b'`);
  assert.ok(byB[0]!.n > 0, 'B applied events of the partitions it got');
  assert.ok(a.stats.assignments >= 3, `A was assigned partitions three times (start, B joined, B left): ${a.stats.assignments}`);
  // Nothing was redelivered: what a process finished before a rebalance was committed before it gave the partition up.
  assert.equal(a.stats.duplicate + b.stats.duplicate, 0, `redeliveries after rebalances: A ${a.stats.duplicate}, B ${b.stats.duplicate}`);
});
