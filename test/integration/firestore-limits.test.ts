/**
 * Firestore's own limits, on Google's Firestore emulator (scripts/firestore/up.sh;
 * skipped when it is not installed): an inbox document over 1 MiB (the
 * envelope with a long key next to it) and INVALID_ARGUMENT classified as a
 * deterministic store refusal, the 10 MiB commit (an enqueue's running total
 * per transaction, replay batches cut by bytes), keys past the 1,500 bytes
 * queries look at, and relay ids Firestore refuses as document ids.
 *
 * The emulator enforces the 1 MiB document ("maximum entity size is 1048576
 * bytes", INVALID_ARGUMENT) and refuses a query on a string over 1,500 bytes
 * (INVALID_ARGUMENT) instead of comparing its first 1,500 bytes; it refuses a
 * request over 4 MiB (its gRPC message limit, RESOURCE_EXHAUSTED, which the
 * client retries for minutes), so the 10 MiB commit is checked before any
 * write and replay's byte bound is lowered here.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Firestore, Transaction } from '@google-cloud/firestore';
import { ConfigError, createInbox, createOutbox, createRelay, defineEvent, InvalidEventError, payloadType, type OutboxEvent } from 'txbox';
import { RecordingTransport } from 'txbox/testing';
import { classifyStoreError } from '../../src/core/store-errors.ts';
import { uuidv7 } from '../../src/core/uuid.ts';
import { FirestoreAdmin, FirestoreInboxStore, FirestoreOutboxStore, FirestoreRelayStore, type FirestoreTx } from '../../src/stores/firestore/index.ts';
import { dropFirestore, emulatorFirestore, firestoreSkip } from '../helpers/firestore.ts';

const Big = defineEvent({ type: 'Big', aggregateType: 'Blob', destination: 'blobs', payload: payloadType<{ pad: string }>() });

function inbound(key: string, pad: string): OutboxEvent {
  return { id: uuidv7(), type: 'Big', aggregateType: 'Blob', aggregateId: 'b', key, destination: 'blobs', payload: { pad }, headers: {}, occurredAt: new Date(), version: null };
}

const skip = await firestoreSkip();

describe('firestore limits', { skip, timeout: 240_000 }, () => {
  let db: Firestore;
  let outbox: ReturnType<typeof createOutbox<FirestoreTx>>;

  before(() => {
    db = emulatorFirestore('limits');
    outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db }), events: [Big] });
  });
  after(async () => {
    await dropFirestore(db);
  });

  describe('inbox documents Firestore refuses', () => {
    it('an envelope near the limit with a 20 KB key: the inbox document is over 1 MiB, refused as SQLSTATE 54000, retry then dead (not rethrown as an outage for ever)', async () => {
      const store = new FirestoreInboxStore({ firestore: db });
      const inbox = createInbox<Transaction>({ store, consumer: 'bigkey', autoStart: false, metrics: false, retry: { maxAttempts: 12, baseDelayMs: 1, maxDelayMs: 1 } });
      inbox.on(Big, async () => {
        throw new Error('downstream says no');
      });
      // The envelope alone passes the envelope check (limit less 16,384 bytes); with the key written next to it, the document does not fit.
      const e = inbound('k'.repeat(20_000), 'x'.repeat(1_010_000));
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push(await inbox.process(e));
      assert.deepEqual(statuses.map((o) => o.status), ['retry', 'retry', 'dead']);
      assert.match((statuses[2] as { error: string }).error, /the inbox store refused recording its failure.*SQLSTATE 54000/);
    });

    it('recordFailure and hold measure the whole document: refused with 54000 before any write', async () => {
      const store = new FirestoreInboxStore({ firestore: db });
      const e = inbound('k'.repeat(20_000), 'x'.repeat(1_010_000));
      for (const call of [() => store.recordFailure('measure', e, 'no', 5), () => store.hold('measure', e, 'waits')]) {
        await assert.rejects(call(), (err: unknown) => classifyStoreError(err) === 'deterministic' && /over what a Firestore inbox document holds/.test((err as Error).message));
      }
      assert.equal((await db.collection('txbox_inbox').where('consumer', '==', 'measure').get()).size, 0, 'nothing written');
    });

    it('INVALID_ARGUMENT from Firestore (gRPC code 3: a key too long to query) is a deterministic refusal, the cause kept', async () => {
      const store = new FirestoreInboxStore({ firestore: db });
      const e = inbound('k'.repeat(1_600), '');
      await assert.rejects(store.runBatch('invalid', [e], async () => {}), (err: unknown) => {
        assert.equal(classifyStoreError(err), 'deterministic', String(err));
        assert.equal(((err as { cause?: { code?: unknown } }).cause)?.code, 3);
        return true;
      });
    });
  });

  describe('the 10 MiB commit', () => {
    const events = (n: number, name: string) => Array.from({ length: n }, (_, i) => Big({ aggregateId: `${name}-${i}`, payload: { pad: 'x'.repeat(1_000_000) } }));

    it('an enqueue of 11 events of about 1 MB is refused before any write, naming the event and the fix', async () => {
      const batch = db.batch();
      await assert.rejects(outbox.enqueue(batch, events(11, 'eleven')), (err: unknown) => {
        assert.ok(err instanceof InvalidEventError, String(err));
        assert.match(err.message, /^events\[\d+\]/);
        assert.match(err.message, /separate transactions/);
        return true;
      });
      assert.equal((batch as unknown as { _opCount: number })._opCount, 0, 'nothing written to the batch');
    });

    it('several enqueue calls in one transaction add up: the call that passes the bound is refused', async () => {
      const batch = db.batch();
      await outbox.enqueue(batch, events(6, 'first'));
      await assert.rejects(outbox.enqueue(batch, events(5, 'second')), (err: unknown) => err instanceof InvalidEventError && /^events\[\d+\]/.test(err.message) && /separate transactions/.test(err.message));
      await assert.rejects(outbox.enqueue(batch, events(4, 'third')), (err: unknown) => err instanceof InvalidEventError && /separate transactions/.test(err.message));
      await outbox.enqueue(batch, events(2, 'fourth'));
    });

    it('a transaction Firestore runs again starts its count afresh', async () => {
      let attempt = 0;
      const stop = new Error('stop before the commit (the emulator takes at most 4 MiB a request)');
      await assert.rejects(
        db.runTransaction(async (tx) => {
          attempt++;
          await outbox.enqueue(tx, events(6, `attempt-${attempt}`));
          if (attempt === 1) throw Object.assign(new Error('contention'), { code: 10 });
          throw stop;
        }),
        (err: unknown) => err === stop,
      );
      assert.equal(attempt, 2);
    });

    it('replay cuts its batches by bytes as well as by count', async () => {
      const admin = new FirestoreAdmin(db);
      const col = db.collection('txbox_outbox');
      const w = db.batch();
      const ids = await outbox.enqueue(w, Array.from({ length: 6 }, (_, i) => Big({ aggregateId: `replay-${i}`, payload: { pad: 'r'.repeat(500_000) } })));
      await w.commit();
      for (const id of ids) {
        const [doc] = (await col.where('id', '==', id).get()).docs;
        await doc!.ref.update({ state: 'published' });
      }
      const progress: number[] = [];
      const { copied } = await admin.replay({ destination: 'blobs' }, 'test', (n) => progress.push(n), 250, 1_200_000);
      assert.equal(copied, 6);
      assert.deepEqual(progress, [2, 4, 6], 'two documents of 500 KB a batch under a 1.2 MB bound');

      // Cut short after its first batch: audited before the first copy, with the id its copies carry.
      const interrupted = new Error('interrupted after the first batch');
      await assert.rejects(
        admin.replay({ destination: 'blobs' }, 'dave', () => {
          throw interrupted;
        }, 250, 1_200_000),
        (err: unknown) => err === interrupted,
      );
      const audit = (await db.collection('txbox_outbox_audit').where('actor', '==', 'dave').get()).docs.map((x) => [x.get('action'), JSON.parse(x.get('detail') as string)]);
      assert.equal(audit.length, 1, JSON.stringify(audit));
      const [action, detail] = audit[0]! as [string, { replayId: string; destination: string }];
      assert.deepEqual([action, detail.destination], ['replay-start', 'blobs']);
      assert.equal((await col.where('replayId', '==', detail.replayId).get()).size, 2, 'the first batch was copied under that id');
    });
  });

  describe('keys past the 1,500 bytes Firestore queries look at', () => {
    it('an enqueue with a key of 1,600 UTF-8 bytes is refused naming event.key; 1,500 bytes pass', async () => {
      const batch = db.batch();
      await assert.rejects(
        outbox.enqueue(batch, Big({ aggregateId: 'long', key: 'é'.repeat(800), payload: { pad: '' } })),
        (err: unknown) => err instanceof InvalidEventError && /^event\.key/.test(err.message) && /1500/.test(err.message),
      );
      await outbox.enqueue(batch, Big({ aggregateId: 'long', key: 'é'.repeat(750), payload: { pad: '' } }));
      await batch.commit();
    });
  });

  describe('relay ids Firestore refuses as document ids', () => {
    for (const relayId of ['.', '..', '__x__']) {
      it(`relayId ${JSON.stringify(relayId)}: start() is refused with a ConfigError naming relayId`, async () => {
        const store = new FirestoreRelayStore({ firestore: db, wake: 'poll' });
        const relay = createRelay({ store, transport: new RecordingTransport(), relayId, pollIntervalMs: 50, retention: false, metrics: false });
        await assert.rejects(relay.start(), (err: unknown) => err instanceof ConfigError && /^relayId/.test(err.message) && /choose another/.test(err.message));
      });
    }
  });
});
