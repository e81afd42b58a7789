/**
 * The Firestore inbox beyond the store conformance suite, on Google's
 * Firestore emulator (scripts/firestore/up.sh; skipped when it is not
 * installed): concurrent deliveries that contend (Firestore runs a
 * transaction's callback again: the handler reruns, its effect and the
 * inbox's counts do not double), group commit of read-modify-write handlers,
 * reads after writes, an envelope too large for a document, the held
 * re-check, the admin (held, dead, prune) and consumer names.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { FieldValue, type Firestore, type Transaction } from '@google-cloud/firestore';
import { ConfigError, createInbox, createOutbox, defineEvent, HoldEvent, InvalidEventError, payloadType, type OutboxEvent } from 'txbox';
import type { InboxStore } from '../../src/core/inbox-ports.ts';
import { uuidv7 } from '../../src/core/uuid.ts';
import { applyVersioned, FirestoreInboxAdmin, FirestoreInboxStore, FirestoreOutboxStore } from '../../src/stores/firestore/index.ts';
import { dropFirestore, emulatorFirestore, firestoreSkip } from '../helpers/firestore.ts';

const Counted = defineEvent({ type: 'Counted', aggregateType: 'Counter', destination: 'counters', payload: payloadType<{ pad?: string }>() });

function event(aggregateId: string, version: number | null = null, payload: { pad?: string } = {}): OutboxEvent {
  return { id: uuidv7(), type: 'Counted', aggregateType: 'Counter', aggregateId, key: `Counter:${aggregateId}`, destination: 'counters', payload, headers: {}, occurredAt: new Date(), version };
}

const skip = await firestoreSkip();

describe('firestore inbox', { skip, timeout: 240_000 }, () => {
  let db: Firestore;
  let store: FirestoreInboxStore;
  let admin: FirestoreInboxAdmin;
  const counters = () => db.collection('counters');
  const inboxDocs = async (consumer: string) => (await db.collection('txbox_inbox').where('consumer', '==', consumer).get()).docs;
  /** A handler that increments its counter document: a read, then a write. */
  const increment = (runs: Map<string, number>) => async (e: OutboxEvent, tx: Transaction) => {
    runs.set(e.id, (runs.get(e.id) ?? 0) + 1);
    const ref = counters().doc(e.aggregateId);
    const snap = await tx.get(ref);
    tx.set(ref, { n: Number(snap.get('n') ?? 0) + 1 });
  };

  before(() => {
    db = emulatorFirestore('inbox');
    store = new FirestoreInboxStore({ firestore: db });
    admin = new FirestoreInboxAdmin(db);
  });
  after(async () => {
    await dropFirestore(db);
  });

  it('concurrent deliveries contend: the event applies once, a handler run again by Firestore counts once, the inbox records one attempt', async (t) => {
    const runs = new Map<string, number>();
    // Separate inboxes (no shared group commit): concurrent transactions on one inbox document and one counter.
    const inboxes = Array.from({ length: 4 }, () => {
      const inbox = createInbox<Transaction>({ store, consumer: 'contend', autoStart: false, metrics: false });
      inbox.on(Counted, increment(runs));
      return inbox;
    });
    const same = event('contend-same');
    const outcomes = await Promise.all(inboxes.map((i) => i.process(same)));
    assert.deepEqual(outcomes.map((o) => o.status).sort(), ['duplicate', 'duplicate', 'duplicate', 'processed']);
    assert.equal((await counters().doc('contend-same').get()).get('n'), 1);
    // Different events of one aggregate: every one applies, in some order, each once.
    const many = Array.from({ length: 6 }, () => event('contend-many'));
    const results = await Promise.all(many.map((e, i) => inboxes[i % inboxes.length]!.process(e)));
    assert.ok(results.every((o) => o.status === 'processed'), results.map((o) => o.status).join(' '));
    assert.equal((await counters().doc('contend-many').get()).get('n'), 6, 'each increment once, although handlers ran again');
    const docs = await inboxDocs('contend');
    assert.equal(docs.length, 7);
    assert.ok(docs.every((d) => d.get('status') === 'processed' && d.get('attempts') === 1), 'one attempt each: a rerun attempt is not counted');
    t.diagnostic(`handler runs for 7 events: ${[...runs.values()].reduce((a, b) => a + b, 0)}`);
  });

  it('group commit: read-modify-write handlers of different documents share one transaction; two of one document in a batch fall back to one each', async () => {
    const runs = new Map<string, number>();
    const sizes: number[] = [];
    const counting: InboxStore<Transaction> = {
      runBatch: (c, events, handler, options) => {
        sizes.push(events.length);
        return store.runBatch(c, events, handler, options);
      },
      recordFailure: (...a) => store.recordFailure(...a),
      hold: (...a) => store.hold(...a),
      recheckHeld: (...a) => store.recheckHeld(...a),
      redrivable: (...a) => store.redrivable(...a),
    };
    const inbox = createInbox<Transaction>({ store: counting, consumer: 'group', autoStart: false, metrics: false });
    inbox.on(Counted, increment(runs));
    const spread = Array.from({ length: 10 }, (_, i) => event(`group-${i}`));
    const outcomes = await Promise.all(spread.map((e) => inbox.process(e)));
    assert.ok(outcomes.every((o) => o.status === 'processed'));
    assert.ok(Math.max(...sizes) > 1, `batches of ${sizes.join(', ')}`);
    assert.equal([...runs.values()].reduce((a, b) => a + b, 0), 10, 'every handler ran once: the batch committed as one (a fallback runs them again)');
    // One key's run in one transaction: the second handler reads the document the first wrote, which Firestore cannot show it.
    runs.clear();
    const run = [event('group-same'), event('group-same'), event('group-same')];
    const inOrder = await Promise.all(inbox.processInOrder(run));
    assert.deepEqual(inOrder.map((o) => o.status), ['processed', 'processed', 'processed']);
    assert.equal((await counters().doc('group-same').get()).get('n'), 3, 'redone one event a transaction: each read saw the one before');
    assert.ok([...runs.values()].reduce((a, b) => a + b, 0) > 3, 'the batch was tried first');
  });

  it('consume and produce: events enqueued through the handler\'s tx commit with its inbox mark, or not at all; the tx is refused after the handler', async () => {
    const Forwarded = defineEvent({ type: 'Forwarded', aggregateType: 'Counter', destination: 'forwarded', payload: payloadType<{ from: string }>() });
    const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db, collection: 'forward_outbox' }), events: [Forwarded] });
    let fail = true;
    let kept: Transaction | undefined;
    const inbox = createInbox<Transaction>({ store, consumer: 'forward', autoStart: false, metrics: false, retry: { baseDelayMs: 1, maxDelayMs: 1 } });
    inbox.on(Counted, async (e, tx) => {
      kept = tx;
      await outbox.enqueue(tx, Forwarded({ aggregateId: e.aggregateId, payload: { from: e.id } }));
      if (fail) throw new Error('after the enqueue');
    });
    const e = event('forward');
    const forwarded = async () => (await db.collection('forward_outbox').where('aggregateId', '==', 'forward').get()).docs.map((d) => JSON.parse(d.get('payload') as string).from);
    assert.equal((await inbox.process(e)).status, 'retry');
    assert.deepEqual(await forwarded(), [], 'rolled back with the handler');
    fail = false;
    assert.equal((await inbox.process(e)).status, 'processed');
    assert.equal((await inbox.process(e)).status, 'duplicate');
    assert.deepEqual(await forwarded(), [e.id], 'once');
    await assert.rejects(outbox.enqueue(kept!, Forwarded({ aggregateId: 'late', payload: { from: 'late' } })), /already ended/);
  });

  it('a handler that reads after its own write is refused with a message that says so', async () => {
    const inbox = createInbox<Transaction>({ store, consumer: 'rw', autoStart: false, metrics: false, retry: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 } });
    inbox.on(Counted, async (e, tx) => {
      tx.set(counters().doc(`rw-${e.aggregateId}`), { at: FieldValue.serverTimestamp() });
      await tx.get(counters().doc('rw-other'));
    });
    const outcome = await inbox.process(event('rw'));
    assert.equal(outcome.status, 'retry');
    assert.match((outcome as { error: string }).error, /read before they write: this handler reads document counters\/rw-other after writing/);
    assert.equal((await counters().doc('rw-rw').get()).exists, false, 'its write did not commit');
  });

  it('an event whose envelope cannot fit in a document: a failure it cannot record is a store refusal, dead on the third', async () => {
    const inbox = createInbox<Transaction>({ store, consumer: 'big', autoStart: false, metrics: false, retry: { maxAttempts: 12, baseDelayMs: 1, maxDelayMs: 1 } });
    inbox.on(Counted, async () => {
      throw new Error('downstream says no');
    });
    const big = event('big', null, { pad: 'x'.repeat(1_100_000) });
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push(await inbox.process(big));
    assert.deepEqual(statuses.map((o) => o.status), ['retry', 'retry', 'dead']);
    assert.match((statuses[2] as { error: string }).error, /the inbox store refused recording its failure.*SQLSTATE 54000.*over what a Firestore inbox document holds/);
  });

  it('held events: listed with their version and reason, re-checked when nobody released them, retried by an operator', async () => {
    const view = db.collection('held_view');
    const inbox = createInbox<Transaction>({ store, consumer: 'held', autoStart: false, metrics: false, heldRecheckIntervalMs: 50 });
    inbox.on(Counted, async (e, tx) => {
      await applyVersioned(tx, { document: view.doc(e.aggregateId), version: e.version!, values: { last: e.id }, onGap: 'hold' });
    });
    const [v1, v2, v3] = [event('held-a', 1), event('held-a', 2), event('held-a', 3)];
    assert.equal((await inbox.process(v1)).status, 'processed');
    assert.equal((await inbox.process(v3)).status, 'held');
    const held = await admin.listHeld({ consumer: 'held' });
    assert.deepEqual(held.map((h) => [h.id, h.version, h.key]), [[v3.id, 3, 'Counter:held-a']]);
    assert.match(held[0]!.lastError ?? '', /version 3 of held_view\/held-a waits for version 2/);
    // v2 applied by another way (a rebuild, a process killed before its release): the re-check finds v3.
    await db.runTransaction(async (tx) => void (await applyVersioned(tx, { document: view.doc('held-a'), version: 2, values: { last: v2.id } })));
    await sleep(100);
    assert.equal(await inbox.recheckHeld(), 1);
    assert.deepEqual((await view.doc('held-a').get()).get('version'), 3);
    assert.deepEqual(await admin.listHeld({ consumer: 'held' }), []);
    // hold() outside a handler's transaction: a new event is kept held, a processed one is left alone.
    const v7 = event('held-b', 7);
    await store.hold('held', v7, 'version 7 waits for version 1');
    await store.hold('held', v1, 'not again');
    assert.deepEqual((await admin.listHeld({ consumer: 'held' })).map((h) => [h.id, h.lastError]), [[v7.id, 'version 7 waits for version 1']]);
    assert.deepEqual((await store.redrivable('held', 10, 'Counter:held-b')).map((e) => [e.id, e.version, e.occurredAt instanceof Date]), [[v7.id, 7, true]]);
    await admin.retryHeld({ all: true, consumer: 'held' }, 'test');
    await inbox.redrive(); // held again: its view document has no version 6
    // An operator retry of a held event whose gap is still open: held again.
    const v9 = event('held-a', 9);
    assert.equal((await inbox.process(v9)).status, 'held');
    assert.deepEqual(await admin.retryHeld({ ids: [v9.id.toUpperCase()] }, 'test'), [v9.id]);
    assert.equal(await inbox.redrive(), 1);
    assert.deepEqual((await admin.listHeld({ consumer: 'held' })).map((h) => h.id).sort(), [v7.id, v9.id].sort());
  });

  it('version 3 deciding to hold while version 2 commits in another process: version 3 is applied, nothing stays held', async () => {
    const view = db.collection('race_view');
    const [v1, v2, v3] = [event('race', 1), event('race', 2), event('race', 3)];
    let v2Started = (): void => {};
    const started = new Promise<void>((r) => (v2Started = r));
    // Process B's store says when version 2's transaction starts; process A's handler of version 3 waits for that while deciding to hold.
    const storeB: InboxStore<Transaction> = {
      runBatch: (c, events, handler, options) => {
        if (events.some((e) => e.id === v2.id)) v2Started();
        return store.runBatch(c, events, handler, options);
      },
      recordFailure: (...a) => store.recordFailure(...a),
      hold: (...a) => store.hold(...a),
      recheckHeld: (...a) => store.recheckHeld(...a),
      redrivable: (...a) => store.redrivable(...a),
    };
    let v3Holds = 0;
    const projecting = (inboxStore: InboxStore<Transaction>) => {
      const inbox = createInbox<Transaction>({ store: inboxStore, consumer: 'race', autoStart: false, metrics: false });
      inbox.on(Counted, async (e, tx) => {
        try {
          await applyVersioned(tx, { document: view.doc(e.aggregateId), version: e.version!, values: { last: e.id }, onGap: 'hold' });
        } catch (err) {
          // The run that writes the hold (the second) waits, after its reads, until version 2's transaction is under way.
          if (err instanceof HoldEvent && e.id === v3.id && ++v3Holds === 2) {
            await started;
            await sleep(300);
          }
          throw err;
        }
      });
      return inbox;
    };
    const [a, b] = [projecting(store), projecting(storeB)];
    assert.equal((await a.process(v1)).status, 'processed');
    const holding = a.process(v3);
    await sleep(50);
    const [o3, o2] = await Promise.all([holding, b.process(v2)]);
    assert.equal(o2.status, 'processed');
    assert.ok(o3.status === 'held' || o3.status === 'processed', o3.status);
    assert.equal((await view.doc('race').get()).get('version'), 3, 'version 3 is applied once version 2 is');
    assert.deepEqual(await admin.listHeld({ consumer: 'race' }), [], 'nothing stays held');
  });

  it('status counts per consumer; dead events: discard deletes them (audited); prune deletes processed documents older than the cutoff, in batches, and nothing else', async () => {
    const inbox = createInbox<Transaction>({ store, consumer: 'prune', autoStart: false, metrics: false, retry: { maxAttempts: 1 } });
    inbox.on(Counted, async (e, tx) => {
      if (e.aggregateId === 'prune-bad') throw new Error('no');
      tx.set(counters().doc(`prune-${e.id}`), { ok: true });
    });
    const bad = event('prune-bad');
    assert.equal((await inbox.process(bad)).status, 'dead');
    for (let i = 0; i < 7; i++) assert.equal((await inbox.process(event('prune-ok'))).status, 'processed');
    assert.deepEqual((await admin.listDead({ consumer: 'prune' })).map((d) => d.id), [bad.id]);
    const [status] = await admin.status(['prune']);
    assert.deepEqual({ ...status!, lastProcessedAt: status!.lastProcessedAt instanceof Date }, { consumer: 'prune', processed: 7, failed: 0, dead: 1, held: 0, retry: 0, processedLastMinute: 7, lastProcessedAt: true });
    assert.deepEqual((await admin.status(['nobody']))[0], { consumer: 'nobody', processed: 0, failed: 0, dead: 0, held: 0, retry: 0, processedLastMinute: 0, lastProcessedAt: null });
    await assert.rejects(admin.status([]), (err: unknown) => err instanceof ConfigError && /consumers/.test(err.message));
    const all = (await db.collection('txbox_inbox').where('status', '==', 'processed').count().get()).data().count;
    assert.equal(await admin.prune(3_600_000), 0, 'nothing processed an hour ago');
    await sleep(20);
    assert.equal(await admin.prune(1, 3), all, 'batches of 3 until done');
    assert.equal((await db.collection('txbox_inbox').where('status', '==', 'processed').count().get()).data().count, 0);
    assert.deepEqual(await admin.discardDead({ all: true, consumer: 'prune' }, 'test'), [bad.id]);
    assert.equal((await inboxDocs('prune')).length, 0);
    const audit = (await db.collection('txbox_inbox_audit').where('eventId', '==', bad.id).get()).docs;
    assert.deepEqual(audit.map((d) => [d.get('action'), d.get('actor'), d.get('detail')]), [['discard', 'test', 'no']]);
  });

  it('consumer names: each its own dedup, names Firestore reads specially included; errors name the field', async () => {
    const seen: string[] = [];
    const e = event('names');
    for (const consumer of ['a:b', 'a_b', '.', '..', '__x__']) {
      const inbox = createInbox<Transaction>({ store, consumer, autoStart: false, metrics: false });
      inbox.on(Counted, async () => void seen.push(consumer));
      assert.equal((await inbox.process(e)).status, 'processed', consumer);
      assert.equal((await inbox.process(e)).status, 'duplicate', consumer);
    }
    assert.deepEqual(seen, ['a:b', 'a_b', '.', '..', '__x__']);
    // The store itself takes any text up to 200 characters (the inbox allows fewer): a slash is no path.
    assert.deepEqual((await store.runBatch('a/b', [e], async () => {})).ran, [true]);
    assert.deepEqual((await store.runBatch('a/b', [e], async () => {})).ran, [false]);
    assert.deepEqual((await store.runBatch('a%3Ab', [e], async () => {})).ran, [true], 'not the document of "a:b"');
    assert.throws(() => store.runBatch('x'.repeat(201), [e], async () => {}), (err: unknown) => err instanceof ConfigError && /consumer/.test(err.message));
    assert.throws(() => new FirestoreInboxStore({} as never), (err: unknown) => err instanceof ConfigError && /firestore/.test(err.message));
    assert.throws(() => new FirestoreInboxStore({ firestore: db, collection: 'in/box' }), (err: unknown) => err instanceof ConfigError && /collection/.test(err.message));
    await assert.rejects(
      db.runTransaction((tx) => applyVersioned(tx, { document: counters().doc('v'), version: 0, values: {} })),
      (err: unknown) => err instanceof InvalidEventError && /^version: must be a positive integer/.test(err.message),
    );
    await assert.rejects(
      db.runTransaction((tx) => applyVersioned(tx, { document: counters().doc('v'), version: 1, values: { version: 3 } })),
      (err: unknown) => err instanceof ConfigError && /values/.test(err.message),
    );
  });
  it("operator retries of more types than one 'in' query takes: the oldest of the handled types, in key order", async () => {
    // 35 types, one retried event each, received in reverse key order; `in` takes 30 values, so the store queries in chunks.
    const types = Array.from({ length: 35 }, (_, i) => `Typed${i}`);
    const inbox = createInbox<Transaction>({ store, consumer: 'many-types', autoStart: false, metrics: false, retry: { baseDelayMs: 1, maxDelayMs: 1, maxAttempts: 1 } });
    for (const type of types)
      inbox.on(type, async () => {
        throw new Error('not yet');
      });
    const events = types.map((type, i) => ({ ...event(`many-${String(99 - i)}`), type }));
    for (const e of events) assert.equal((await inbox.process(e)).status, 'dead');
    assert.equal((await admin.retryDead({ all: true, consumer: 'many-types' }, 'test')).length, 35);
    const byKey = (list: OutboxEvent[]) => list.map((e) => e.id);
    const inKeyOrder = [...events].reverse();
    assert.deepEqual(byKey(await store.redrivable('many-types', 100, undefined, types)), byKey(inKeyOrder));
    // The limit takes the oldest received (the first 5 processed: the last 5 in key order), then sorts them by key.
    assert.deepEqual(byKey(await store.redrivable('many-types', 5, undefined, types)), byKey(events.slice(0, 5).reverse()));
    assert.deepEqual(byKey(await store.redrivable('many-types', 100, undefined, ['Typed3', 'Typed34'])), byKey([events[34]!, events[3]!]));
    assert.deepEqual(await store.redrivable('many-types', 100, undefined, []), []);
    assert.equal((await store.redrivable('many-types', 100)).length, 35, 'no types: every retried event');
  });
});
