/**
 * The Firestore store beyond the conformance suite, on Google's Firestore
 * emulator (scripts/firestore/up.sh; skipped when it is not installed): the
 * write through a Transaction and a WriteBatch, per-key order among
 * concurrent writers of one aggregate, claims that page past held keys, the
 * snapshot-listener wake-up (and its recovery after an emulator restart, on
 * a private emulator), relay documents' cleanup, and the errors that name
 * the field.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Firestore, Timestamp, type Transaction } from '@google-cloud/firestore';
import { ConfigError, createOutbox, createRelay, defineEvent, InvalidEventError, payloadType, PayloadTooLargeError, TransportError, type Relay } from 'txbox';
import { checkDeliveries, RecordingTransport } from 'txbox/testing';
import { FirestoreOutboxStore, FirestoreRelayStore } from '../../src/stores/firestore/index.ts';
import { dropFirestore, emulatorFirestore, firestoreSkip } from '../helpers/firestore.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

const Changed = defineEvent({ type: 'Changed', aggregateType: 'Acct', destination: 'accounts', payload: payloadType<{ n: number }>() });
const Poison = defineEvent({ type: 'Poison', aggregateType: 'Acct', destination: 'poison', payload: payloadType<{ n: number }>() });

const skip = await firestoreSkip();

describe('firestore store', { skip, timeout: 240_000 }, () => {
  let db: Firestore;
  let outbox: ReturnType<typeof createOutbox<import('../../src/stores/firestore/index.ts').FirestoreTx>>;
  const open: { relays: Relay[]; stores: FirestoreRelayStore[] } = { relays: [], stores: [] };
  const relay = (transport: RecordingTransport, options: Partial<Parameters<typeof createRelay>[0]> & { wake?: 'listen' | 'poll' } = {}) => {
    const { wake, ...rest } = options;
    const store = new FirestoreRelayStore({ firestore: db, ...(wake ? { wake } : {}) });
    const r = createRelay({ store, transport, pollIntervalMs: 50, leaseTtlMs: 5000, retention: false, metrics: false, ...rest });
    open.stores.push(store);
    open.relays.push(r);
    return { relay: r, store };
  };
  const stopAll = async () => {
    await Promise.all(open.relays.splice(0).map((r) => r.stop()));
    await Promise.all(open.stores.splice(0).map((s) => s.close()));
  };
  const states = async (ids: readonly string[]) => {
    const docs = (await db.collection('txbox_outbox').get()).docs;
    return new Map(docs.filter((d) => ids.includes(d.get('id'))).map((d) => [d.get('id') as string, d.get('state') as string]));
  };

  before(() => {
    db = emulatorFirestore('store');
    outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db }), events: [Changed, Poison] });
  });
  after(async () => {
    await stopAll();
    await dropFirestore(db);
  });

  for (const [lanes, how] of [[1, 'one query over its 256 buckets'], [8, 'groups of 30 buckets (32 a lane)']] as const) {
    it(`a claim pages past the events held behind a parked one, so the keys after them are not starved (${how})`, async () => {
      // A poison event parks; 60 events of its key wait behind it, all earlier in outbox order than another key's event.
      const [poison] = await db.runTransaction((tx) => outbox.enqueue(tx, Poison({ aggregateId: `stuck-${lanes}`, payload: { n: 0 } })));
      for (let i = 0; i < 3; i++) await db.runTransaction((tx) => outbox.enqueue(tx, Array.from({ length: 20 }, (_, k) => Changed({ aggregateId: `stuck-${lanes}`, payload: { n: i * 20 + k } }))));
      const transport = new RecordingTransport({ fail: (e) => (e.destination === 'poison' ? new TransportError('permanent', 'HTTP 400') : undefined) });
      const { relay: r } = relay(transport, { batchSize: 10, lanes });
      await r.start();
      try {
        await waitFor('the poison event parked', async () => (await states([poison!])).get(poison!) === 'parked', 30_000);
        const [free] = await db.runTransaction((tx) => outbox.enqueue(tx, Changed({ aggregateId: `free-${lanes}`, payload: { n: 1 } })));
        await waitFor('the other key published past the 60 held events', () => transport.acked.some((e) => e.id === free), 30_000);
        assert.equal(transport.acked.filter((e) => e.key === `Acct:stuck-${lanes}`).length, 0, 'the held key stays held');
      } finally {
        await stopAll();
      }
    });
  }

  it('one aggregate written by concurrent transactions: its events are published in the order its writes committed', async () => {
    const accounts = db.collection('accounts');
    const committed = new Map<string, string[]>();
    const writer = async (w: number) => {
      for (let i = 0; i < 6; i++) {
        const acct = `acct-${(w + i) % 3}`;
        // Read-modify-write of the aggregate, as an app does; the version it reads orders its event.
        const [version, id] = await db.runTransaction(
          async (tx) => {
            const snap = await tx.get(accounts.doc(acct));
            const version = ((snap.get('version') as number | undefined) ?? 0) + 1;
            tx.set(accounts.doc(acct), { version });
            const [id] = await outbox.enqueue(tx, Changed({ aggregateId: acct, version, payload: { n: version } }));
            return [version, id!] as const;
          },
          { maxAttempts: 100 },
        );
        const list = committed.get(`Acct:${acct}`) ?? [];
        list[version - 1] = id;
        committed.set(`Acct:${acct}`, list);
      }
    };
    const transport = new RecordingTransport();
    await relay(transport, { batchSize: 7 }).relay.start();
    try {
      await Promise.all(Array.from({ length: 6 }, (_, w) => writer(w)));
      await waitFor('36 events acked', () => transport.acked.filter((e) => e.key.startsWith('Acct:acct-')).length >= 36, 60_000);
      const report = checkDeliveries(committed, transport.acked.filter((e) => e.key.startsWith('Acct:acct-')));
      assert.deepEqual([report.lost, report.phantom, report.orderViolations], [0, 0, 0]);
      for (const [key, ids] of committed) assert.deepEqual(transport.acked.filter((e) => e.key === key).map((e) => e.version), ids.map((_, i) => i + 1), key);
    } finally {
      await stopAll();
    }
  });

  it('a WriteBatch takes the events with the business writes: nothing until it commits, then published in order', async () => {
    const batch = db.batch();
    batch.set(db.collection('accounts').doc('batch-1'), { opened: true });
    const ids = await outbox.enqueue(batch, [Changed({ aggregateId: 'batch-1', payload: { n: 1 } }), Changed({ aggregateId: 'batch-1', payload: { n: 2 } })]);
    const more = await outbox.enqueue(batch, Changed({ aggregateId: 'batch-1', payload: { n: 3 } }));
    assert.equal((await states(ids)).size, 0, 'nothing is written before the batch commits');
    await batch.commit();
    const abandoned = db.batch();
    const lost = await outbox.enqueue(abandoned, Changed({ aggregateId: 'batch-2', payload: { n: 1 } }));
    const transport = new RecordingTransport();
    await relay(transport).relay.start();
    try {
      await waitFor('the batch published', () => transport.acked.filter((e) => e.key === 'Acct:batch-1').length === 3, 30_000);
      assert.deepEqual(transport.acked.filter((e) => e.key === 'Acct:batch-1').map((e) => e.id), [...ids, ...more], 'two enqueue calls in one batch keep their order');
      assert.equal((await states(lost)).size, 0, 'a batch never committed wrote nothing');
      assert.equal((await db.collection('accounts').doc('batch-1').get()).get('opened'), true);
    } finally {
      await stopAll();
    }
  });

  it('an idle relay is woken by the snapshot listener long before its poll; with wake: "poll" the store hears nothing', async () => {
    const transport = new RecordingTransport();
    const { relay: r, store } = relay(transport, { pollIntervalMs: 600_000, minPollIntervalMs: 600_000 });
    const { relay: p, store: polling } = relay(new RecordingTransport(), { pollIntervalMs: 600_000, minPollIntervalMs: 600_000, wake: 'poll' });
    await r.start();
    await p.start();
    try {
      await waitFor('the listener attached (its first snapshot counts)', () => store.wakeups() >= 1, 30_000);
      const heard = store.wakeups();
      const [id] = await db.runTransaction((tx) => outbox.enqueue(tx, Changed({ aggregateId: 'wake-1', payload: { n: 1 } })));
      // The poll is ten minutes away: only a wake-up can publish it within the wait.
      await waitFor('published after a wake-up', () => transport.acked.some((e) => e.id === id), 60_000);
      assert.ok(store.wakeups() > heard, 'the listener counted the commit');
      assert.equal(polling.wakeups(), 0);
    } finally {
      await stopAll();
    }
  });

  it('an emulator restart under a listening relay (a private emulator): events committed after it are published, and the listener hears commits again', { timeout: 240_000 }, async (t) => {
    // Its own emulator on a port of its own: stopping it disturbs no other test (the shared one on 8086 stays up).
    const port = await freePort();
    const script = (name: string): void =>
      void execFileSync('bash', [new URL(`../../scripts/firestore/${name}`, import.meta.url).pathname], { env: { ...process.env, TXBOX_FIRESTORE_PORT: String(port) }, stdio: ['ignore', 'ignore', 'inherit'], timeout: 180_000 });
    script('up.sh');
    // The client takes its host from FIRESTORE_EMULATOR_HOST when it is built (the variable wins over settings).
    const shared = process.env.FIRESTORE_EMULATOR_HOST;
    process.env.FIRESTORE_EMULATOR_HOST = `127.0.0.1:${port}`;
    const own = new Firestore({ projectId: 'txbox-listener' });
    process.env.FIRESTORE_EMULATOR_HOST = shared;
    const ownOutbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: own }), events: [Changed] });
    const store = new FirestoreRelayStore({ firestore: own });
    const transport = new RecordingTransport();
    const r = createRelay({ store, transport, pollIntervalMs: 1000, minPollIntervalMs: 1000, leaseTtlMs: 5000, retention: false, metrics: false });
    const enqueue = async (n: number): Promise<string> => {
      for (;;) {
        try {
          const [id] = await own.runTransaction((tx) => ownOutbox.enqueue(tx, Changed({ aggregateId: 'listen', payload: { n } })));
          return id!;
        } catch {
          await sleep(200); // the client reconnecting to the restarted emulator
        }
      }
    };
    try {
      await r.start();
      await waitFor('the listener attached', () => store.wakeups() >= 1, 30_000);
      const first = await enqueue(1);
      await waitFor('published before the restart', () => transport.acked.some((e) => e.id === first), 30_000);
      script('down.sh');
      await sleep(8000); // the client's watch stream backs off while nothing answers
      script('up.sh'); // a fresh emulator: every document is gone, the relay leases the buckets again
      const heard = store.wakeups();
      const second = await enqueue(2);
      await waitFor('published after the restart', () => transport.acked.some((e) => e.id === second), 60_000);
      t.diagnostic(`wake-ups counted between the restart and that delivery: ${store.wakeups() - heard}`);
      // The listener hears commits again: each new event changes the newest pending one.
      const before = store.wakeups();
      const more: string[] = [];
      const deadline = Date.now() + 90_000;
      while (store.wakeups() === before && Date.now() < deadline) {
        more.push(await enqueue(3 + more.length));
        await sleep(1500);
      }
      assert.ok(store.wakeups() > before, 'the listener counted a commit after the restart');
      await waitFor('every event after the restart published', () => more.every((id) => transport.acked.some((e) => e.id === id)), 60_000);
    } finally {
      await r.stop();
      await store.close();
      await own.terminate();
      script('down.sh');
      rmSync(join(process.env.TXBOX_FIRESTORE_HOME ?? join(homedir(), '.cache/txbox-firestore'), `emulator-${port}.log`), { force: true });
    }
  });

  it('a Transaction whose callback already returned (committed or rolled back) is refused, not written into nothing', async () => {
    let kept: Transaction | undefined;
    await db.runTransaction(async (tx) => {
      await tx.get(db.collection('accounts').doc('late'));
      kept = tx;
    });
    await assert.rejects(outbox.enqueue(kept!, Changed({ aggregateId: 'late', payload: { n: 1 } })), (err: unknown) => err instanceof InvalidEventError && /already committed or rolled back/.test(err.message));
    await assert.rejects(
      db.runTransaction(async (tx) => {
        await tx.get(db.collection('accounts').doc('late'));
        kept = tx;
        throw new Error('business rule failed');
      }),
      /business rule failed/,
    );
    await assert.rejects(outbox.enqueue(kept!, Changed({ aggregateId: 'late', payload: { n: 2 } })), /already committed or rolled back/);
    const batch = db.batch();
    await batch.commit();
    await assert.rejects(outbox.enqueue(batch, Changed({ aggregateId: 'late', payload: { n: 3 } })), /committed/);
  });

  it('relay documents: a clean stop deletes its own, a live relay deletes those expired for over a day and keeps the others', async () => {
    const relays = db.collection('txbox_outbox_relays');
    const old = Timestamp.fromMillis(Date.now() - 2 * 86_400_000);
    const recent = Timestamp.fromMillis(Date.now() - 3_600_000);
    // A relay killed two days ago, one that left cleanly two days ago (older txbox kept them), one expired an hour ago.
    await relays.doc('gone-crashed').set({ relayId: 'gone-crashed', host: 'h', pid: 1, ttlMs: 30_000, heartbeatAt: old, leftAt: null });
    await relays.doc('gone-left').set({ relayId: 'gone-left', host: 'h', pid: 2, ttlMs: 30_000, heartbeatAt: old, leftAt: old });
    await relays.doc('expired-recently').set({ relayId: 'expired-recently', host: 'h', pid: 3, ttlMs: 30_000, heartbeatAt: recent, leftAt: null });
    const { relay: r } = relay(new RecordingTransport());
    await r.start();
    try {
      await waitFor('the documents of relays expired for over a day deleted', async () => !(await relays.doc('gone-crashed').get()).exists && !(await relays.doc('gone-left').get()).exists, 30_000);
      assert.equal((await relays.doc('expired-recently').get()).exists, true, 'a relay expired an hour ago is kept (txbox status shows it expired)');
      assert.equal((await relays.doc(r.relayId).get()).exists, true, 'the live relay heartbeats');
    } finally {
      await stopAll();
    }
    assert.equal((await relays.doc(r.relayId).get()).exists, false, 'a clean stop deletes the relay\'s document');
    await relays.doc('expired-recently').delete();
  });

  it('backlog counts pending and parked events', async () => {
    const store = new FirestoreRelayStore({ firestore: db });
    try {
      const before = await store.backlog();
      await db.runTransaction((tx) => outbox.enqueue(tx, [Changed({ aggregateId: 'backlog', payload: { n: 1 } }), Changed({ aggregateId: 'backlog', payload: { n: 2 } })]));
      const now = await store.backlog();
      assert.deepEqual([now.pending - before.pending, now.parked - before.parked], [2, 0]);
      assert.ok(now.parked >= 1, 'the poison event of the first case is parked');
    } finally {
      await store.close();
    }
  });

  it('errors name the field: a payload over the document limit, a missing Firestore, a bad collection name, a bad wake mode, a too short relay retention', async () => {
    const big = createOutbox({ store: new FirestoreOutboxStore({ firestore: db }), events: [Changed], maxPayloadBytes: 4 * 1024 * 1024 });
    await assert.rejects(
      db.runTransaction((tx) => big.enqueue(tx, Changed({ aggregateId: 'big', payload: { n: 1, pad: 'x'.repeat(1_100_000) } as { n: number } }))),
      (err: unknown) => err instanceof PayloadTooLargeError && /event\.payload/.test(err.message),
    );
    assert.throws(() => new FirestoreOutboxStore({} as never), (err: unknown) => err instanceof ConfigError && /firestore/.test(err.message));
    assert.throws(() => new FirestoreRelayStore({ firestore: db, collection: 'a/b' }), (err: unknown) => err instanceof ConfigError && /collection/.test(err.message) && /"\/"/.test(err.message));
    assert.throws(() => new FirestoreOutboxStore({ firestore: db, collection: '__outbox__' }), /reserved by Firestore/);
    assert.throws(() => new FirestoreRelayStore({ firestore: db, wake: 'notify' as never }), /wake/);
    assert.throws(() => new FirestoreRelayStore({ firestore: db, maxClaimScan: 0 }), /maxClaimScan/);
    assert.throws(() => new FirestoreRelayStore({ firestore: db, relayRetentionMs: 1000 }), (err: unknown) => err instanceof ConfigError && /relayRetentionMs/.test(err.message) && /60000/.test(err.message));
  });
});
