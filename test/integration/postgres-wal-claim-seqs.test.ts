/**
 * The WAL wake mode's claims by seq (migration 008, src/stores/postgres/postgres-wal-targets.ts)
 * on the real PostgreSQL: a steady stream of commits is claimed by seq, and
 * every case where rows become claimable without a commit announcing them
 * still delivers them, in per-key order: an operator's retry of a parked
 * event, a retry coming due, and rows released from a hold. Polling is off
 * (10 minutes) and the periodic ordinary claim is an hour apart, so only the
 * mechanisms under test can deliver.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType, TransportError } from 'txbox';
import { dropPublication, PostgresAdmin, postgresNames, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport, type FailureRule } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;

before(async () => {
  db = await openDb('postgres');
});
after(async () => {
  await dropPublication(db.connection, postgresNames({ schema: db.schema })).catch(() => {});
  await db.close();
});

const outbox = () => createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [E] });
const enqueue = (aggregateId: string, n: number) => db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId, payload: { n } }))).then(([id]) => id!);

/** A relay woken by the WAL stream alone, one lane, with the given retry policy. */
async function walRelay(fail: FailureRule, retry = { maxAttempts: 1, baseDelayMs: 10, maxDelayMs: 10 }, pollMs = 600_000) {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const transport = new RecordingTransport({ fail });
  const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection, wake: 'wal', walFullClaimEveryMs: 3_600_000 });
  const relay = createRelay({ store, transport, lanes: 1, pollIntervalMs: pollMs, minPollIntervalMs: pollMs, leaseTtlMs: 10_000, retry });
  await relay.start();
  await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
  return { transport, store, relay };
}

it('a steady stream of single-event commits is claimed by seq, in order, with no ordinary claim after the first', async () => {
  const { transport, store, relay } = await walRelay(() => undefined);
  try {
    // The relay's first claims are ordinary (nothing seen yet); one commit makes the lane's buckets seen.
    await enqueue('warm', 0);
    await waitFor('warm-up published', () => transport.acked.length === 1);
    const before = store.claimStats();
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) {
      ids.push(await enqueue(`k${i % 5}`, i));
      await waitFor(`event ${i} published`, () => transport.acked.some((e) => e.id === ids[i]));
    }
    const after = store.claimStats();
    assert.equal(after.ordinary - before.ordinary, 0, `ordinary claims during the stream: ${JSON.stringify({ before, after })}`);
    assert.ok(after.bySeq - before.bySeq >= 60, `claims by seq: ${JSON.stringify({ before, after })}`);
    const seen = new Map<string, number>();
    for (const e of transport.acked) {
      const n = (e.payload as { n: number }).n;
      assert.ok((seen.get(e.key) ?? -1) < n, `per-key order: ${e.key} ${n} after ${seen.get(e.key)}`);
      seen.set(e.key, n);
    }
  } finally {
    await relay.stop();
  }
});

it("an operator's retry of a parked event is published before the next event of its key, which commits right after", async () => {
  let failFirst = true;
  // Polling every 2 s: a relay that let the new event overtake would still publish the retried one, after it.
  const { transport, relay } = await walRelay((e) => (failFirst && e.key.endsWith(':held') ? new TransportError('permanent', 'refused') : undefined), undefined, 2000);
  try {
    const first = await enqueue('held', 1);
    const admin = new PostgresAdmin(db.connection, { schema: db.schema });
    await waitFor('the first event parked', async () => (await admin.listParked({ limit: 10 })).some((p) => p.id === first));
    failFirst = false;
    // The retry is an UPDATE: the WAL stream (inserts only) does not announce it.
    assert.deepEqual(await admin.retryParked({ ids: [first] }, 'test'), [first]);
    const second = await enqueue('held', 2);
    await waitFor('both published', () => [first, second].every((id) => transport.acked.some((e) => e.id === id)));
    const order = transport.acked.filter((e) => e.key.endsWith(':held')).map((e) => e.id);
    assert.deepEqual(order, [first, second], 'the retried event went first');
  } finally {
    await relay.stop();
  }
});

it('a retry comes due while other keys keep the lane busy with claims by seq: published at its time, not at the next poll', async () => {
  let failures = 0;
  const { transport, relay } = await walRelay(
    (e) => (e.key.endsWith(':flaky') && failures++ === 0 ? new TransportError('retriable', 'try again') : undefined),
    { maxAttempts: 5, baseDelayMs: 300, maxDelayMs: 300 },
  );
  try {
    const flaky = await enqueue('flaky', 1);
    await waitFor('the first attempt failed', () => failures >= 1);
    const started = Date.now();
    // Commits of other keys every 20 ms: the lane never waits out a poll.
    let n = 0;
    while (!transport.acked.some((e) => e.id === flaky)) {
      assert.ok(Date.now() - started < 10_000, 'the retried event was not published within 10 s');
      await enqueue(`busy${n % 3}`, n++);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(Date.now() - started < 3000, `published ${Date.now() - started} ms after its 300 ms backoff`);
  } finally {
    await relay.stop();
  }
});

it('rows held behind a failed event are released when it is published, and follow it in order', async () => {
  let releaseHead!: () => void;
  const headWaits = new Promise<void>((r) => (releaseHead = r));
  let failures = 0;
  const { transport, store, relay } = await walRelay(
    (e) => (e.key.endsWith(':head') && (e.payload as { n: number }).n === 1 && failures++ === 0 ? new TransportError('retriable', 'try again') : undefined),
    { maxAttempts: 5, baseDelayMs: 500, maxDelayMs: 500 },
  );
  // The head's first attempt answers only once the rows behind it have committed, so that its failure holds them (migration 005).
  const publish = transport.publish.bind(transport);
  transport.publish = async (events, signal) => {
    if (events.some((e) => e.key.endsWith(':head') && (e.payload as { n: number }).n === 1) && failures === 0) await headWaits;
    return publish(events, signal);
  };
  try {
    const head = await enqueue('head', 1);
    const behind = [await enqueue('head', 2), await enqueue('head', 3)];
    releaseHead();
    await waitFor('the rows behind the head held', async () => {
      const [r] = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE held_by IS NOT NULL`);
      return Number(r!.n) === 2;
    });
    await waitFor('the head and the rows behind it published', () => [head, ...behind].every((id) => transport.acked.some((e) => e.id === id)), 10_000);
    assert.deepEqual(transport.acked.filter((e) => e.key.endsWith(':head')).map((e) => e.id), [head, ...behind]);
    assert.ok(store.claimStats().bySeq > 0);
  } finally {
    await relay.stop();
  }
});

it("while a batch's mark is slow, the lane publishes the next commits by seq; an event of the key being marked waits for the mark", async () => {
  const { transport, store, relay } = await walRelay(() => undefined);
  const publishedAt = new Map<string, number>();
  const publish = transport.publish.bind(transport);
  transport.publish = async (events, signal) => {
    for (const e of events) publishedAt.set(e.id, performance.now());
    return publish(events, signal);
  };
  // Marks that take 1.5 s once `slow` is set: the time the old lane loop waited before its next claim.
  let slow = false;
  const marksDone: number[] = [];
  const complete = store.complete.bind(store);
  store.complete = async (relayId, completions) => {
    if (slow) await new Promise((r) => setTimeout(r, 1500));
    const r = await complete(relayId, completions);
    marksDone.push(performance.now());
    return r;
  };
  try {
    await enqueue('warm', 0);
    await waitFor('warm-up published and marked', () => transport.acked.length === 1 && marksDone.length === 1);
    slow = true;
    const a = await enqueue('one', 1);
    await waitFor('a published', () => publishedAt.has(a));
    const b = await enqueue('two', 1);
    const c = await enqueue('one', 2);
    await waitFor('b and c published', () => publishedAt.has(b) && publishedAt.has(c), 15_000);
    const aMarked = marksDone[1]!;
    assert.ok(publishedAt.get(b)! < aMarked, `b (another key) was published ${(publishedAt.get(b)! - aMarked).toFixed(0)} ms after a's mark returned, not while it ran`);
    assert.ok(publishedAt.get(c)! > aMarked, `c (a's key) was published ${(aMarked - publishedAt.get(c)!).toFixed(0)} ms before a's mark returned`);
    assert.deepEqual(transport.acked.filter((e) => e.key.endsWith(':one')).map((e) => e.id), [a, c]);
  } finally {
    slow = false;
    await relay.stop();
  }
  // Every mark ran: nothing left pending.
  const [left] = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${db.schema}".outbox WHERE state <> 'published'`);
  assert.equal(Number(left!.n), 0);
});
