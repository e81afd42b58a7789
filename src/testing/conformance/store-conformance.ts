/**
 * The store conformance suite: every outbox/inbox store runs it against its
 * real database (Kysely's loop over dialects in spirit). It drives the
 * store's three ports (OutboxStore, RelayStore, InboxStore) through the
 * public core (createOutbox, createRelay, createInbox) and, for lease
 * fencing, through the RelayStore methods directly.
 *
 * The store gives a small factory: open a fresh, migrated namespace (a
 * schema, a database) and hand over its stores, an app transaction runner in
 * the store's own transaction type, and a few read-only probes the suite
 * asserts with.
 *
 * @example
 * import { runStoreConformance } from 'txbox/testing/conformance';
 * runStoreConformance({ name: 'postgres', open: () => openPostgresNamespace() });
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TransportError } from '../../core/errors.ts';
import { defineEvent, payloadType } from '../../core/events.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import type { InboxStore } from '../../core/inbox-ports.ts';
import { createOutbox, type Outbox } from '../../core/outbox.ts';
import type { BucketLease, OutboxStore, RelayStore } from '../../core/ports.ts';
import { uuidv7 } from '../../core/uuid.ts';
import { createInbox } from '../../inbox/inbox.ts';
import { createRelay, type Relay } from '../../relay/relay.ts';
import { checkDeliveries } from '../order-check.ts';
import { RecordingTransport } from '../recording-transport.ts';

/** One outbox row as the suite sees it, in outbox order. */
export interface ConformanceOutboxRow {
  readonly id: string;
  readonly key: string;
  readonly state: 'pending' | 'published' | 'parked' | 'skipped';
  readonly attempts: number;
  readonly lastError: string | null;
}

/** What a version-guarded upsert did (the shape of `applyVersioned`'s result). */
export type ConformanceProjectionResult =
  | { readonly status: 'applied' }
  | { readonly status: 'stale' }
  | { readonly status: 'gap'; readonly missing: readonly [number, number] };

/** A transaction the suite holds open (for the commit-order gap). */
export interface OpenTransaction<Tx> {
  readonly tx: Tx;
  commit(): Promise<void>;
}

/** A fresh, migrated, isolated namespace of the store under test. */
export interface StoreConformanceNamespace<Tx> {
  /** The write side of this namespace's outbox. */
  readonly outboxStore: OutboxStore<Tx>;
  /** A new relay store on this namespace; each relay of a case gets its own. The suite closes them. */
  relayStore(): RelayStore;
  /** The inbox store of this namespace (its tables migrated). Omit for a store without an inbox yet: the inbox and projection cases are skipped. */
  readonly inboxStore?: InboxStore<Tx>;
  /** Runs `fn` in an app transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Begins an app transaction on its own connection and leaves it open. Omit
   * it where transactions are exclusive (PGlite): the commit-order gap and the
   * concurrent redelivery checks are then skipped.
   */
  openTransaction?(): Promise<OpenTransaction<Tx>>;
  /**
   * Set when the commit-order gap cannot arise in this store: why (e.g.
   * Firestore orders events by their transaction's commit time, so no event
   * can commit later with an earlier position). The gap case is skipped with it.
   */
  readonly noCommitOrderGap?: string;
  /** Every outbox row, in outbox order. */
  rows(): Promise<ConformanceOutboxRow[]>;
  /** What `txbox parked retry|skip` and `txbox replay` do. Each returns the ids (replay: how many) it changed. */
  retryParked(ids: readonly string[]): Promise<string[]>;
  skipParked(ids: readonly string[]): Promise<string[]>;
  replay(destination: string): Promise<number>;
  /** Writes one row of business data (`note`) through `tx`, and counts such rows: the handler's and the app's effect. */
  recordEffect(tx: Tx, note: string): Promise<void>;
  countEffects(note: string): Promise<number>;
  /** The store's version-guarded upsert on a read model `(id, quantity, version)`. */
  applyVersioned?(tx: Tx, row: { readonly id: string; readonly version: number; readonly quantity: number; readonly onGap: 'apply' | 'hold' }): Promise<ConformanceProjectionResult>;
  readProjection?(id: string): Promise<{ readonly quantity: number; readonly version: number } | null>;
  /**
   * The inbox admin's dead-letter operations (`txbox inbox dead list|retry`):
   * the dead events of `consumer` (ids), and marking them to run again
   * (returns the ids changed). Omit both and the dead-letter case is skipped.
   */
  listDead?(consumer: string): Promise<string[]>;
  retryDead?(consumer: string): Promise<string[]>;
  /** Drops the namespace and closes what `open` opened. */
  close(): Promise<void>;
}

export interface StoreConformanceOptions<Tx> {
  readonly name: string;
  /** Opens a fresh namespace; called once per case, closed after it. */
  open(): Promise<StoreConformanceNamespace<Tx>>;
}

const Item = defineEvent({ type: 'ItemChanged', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });
const Poison = defineEvent({ type: 'Poison', aggregateType: 'Item', destination: 'poison', payload: payloadType<{ n: number }>() });
const Stock = defineEvent({ type: 'StockChanged', aggregateType: 'Sku', destination: 'stock', payload: payloadType<{ quantity: number }>() });

const stats = { host: 'conformance', pid: process.pid, inFlight: 0, publishedTotal: 0, ratePerMinute: 0 };

async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function stockEvent(sku: string, version: number | null, quantity: number): OutboxEvent {
  return { id: uuidv7(), type: 'StockChanged', aggregateType: 'Sku', aggregateId: sku, key: `Sku:${sku}`, destination: 'stock', payload: { quantity }, headers: {}, occurredAt: new Date(), version };
}

export function runStoreConformance<Tx>(options: StoreConformanceOptions<Tx>): void {
  describe(`store conformance: ${options.name}`, { timeout: 300_000 }, () => {
    let ns: StoreConformanceNamespace<Tx>;
    let outbox: Outbox<Tx>;
    let relays: Relay[] = [];
    let stores: RelayStore[] = [];
    before(async () => {
      ns = await options.open();
      outbox = createOutbox({ store: ns.outboxStore, events: [Item, Poison, Stock] });
    });
    after(async () => {
      await ns.close();
    });

    /** Cases share the namespace (retention runs last, over what the others left): each uses its own aggregates and looks only at its own rows. */
    const relay = (transport: RecordingTransport, extra: Partial<Parameters<typeof createRelay>[0]> = {}): Relay => {
      const store = ns.relayStore();
      stores.push(store);
      const r = createRelay({ store, transport, pollIntervalMs: 30, leaseTtlMs: 3000, retry: { baseDelayMs: 40, maxDelayMs: 200, maxAttempts: 4 }, retention: false, metrics: false, ...extra });
      relays.push(r);
      return r;
    };
    const stopAll = async (): Promise<void> => {
      await Promise.all(relays.map((r) => r.stop()));
      await Promise.all(stores.map((s) => s.close()));
      relays = [];
      stores = [];
    };
    const rowsOf = async (ids: readonly string[]): Promise<ConformanceOutboxRow[]> => {
      const wanted = new Set(ids);
      return (await ns.rows()).filter((r) => wanted.has(r.id));
    };

    it('atomic with the caller transaction: a rollback leaves neither the events nor the business row, a commit keeps both', async () => {
      const [kept] = await ns.transaction(async (tx) => {
        await ns.recordEffect(tx, 'atomic-commit');
        return outbox.enqueue(tx, Item({ aggregateId: 'atomic-1', payload: { n: 1 } }));
      });
      let lost: string[] = [];
      await assert.rejects(
        ns.transaction(async (tx) => {
          await ns.recordEffect(tx, 'atomic-rollback');
          lost = await outbox.enqueue(tx, [Item({ aggregateId: 'atomic-2', payload: { n: 1 } }), Item({ aggregateId: 'atomic-2', payload: { n: 2 } })]);
          throw new Error('business rule failed');
        }),
        /business rule failed/,
      );
      assert.equal(lost.length, 2, 'the rolled-back enqueue had run');
      const rows = await rowsOf([kept!, ...lost]);
      assert.deepEqual(rows.map((r) => [r.id, r.state]), [[kept, 'pending']]);
      assert.equal(await ns.countEffects('atomic-commit'), 1);
      assert.equal(await ns.countEffects('atomic-rollback'), 0);
      // Drain them so later cases start with nothing pending.
      const transport = new RecordingTransport();
      await relay(transport).start();
      await waitFor('the committed event published', () => transport.acked.some((e) => e.id === kept));
      await stopAll();
      assert.equal(transport.acked.filter((e) => lost.includes(e.id)).length, 0, 'nothing rolled back is published');
    });

    it('the envelope arrives as enqueued: occurredAt to the millisecond (before 1970 too), version, headers and the payload', async () => {
      const at = [new Date('2026-11-28T09:00:00.123Z'), new Date(-1), new Date('0001-01-01T00:00:00.999Z')];
      const ids = await ns.transaction((tx) =>
        outbox.enqueue(
          tx,
          at.map((occurredAt, i) => Item({ aggregateId: `envelope-${i}`, payload: { n: i }, occurredAt, version: i + 1, headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })),
        ),
      );
      const transport = new RecordingTransport();
      await relay(transport).start();
      await waitFor('the three published', () => ids.every((id) => transport.acked.some((e) => e.id === id)));
      await stopAll();
      for (let i = 0; i < ids.length; i++) {
        const e = transport.acked.find((x) => x.id === ids[i])!;
        assert.equal(e.occurredAt.getTime(), at[i]!.getTime(), `occurredAt of event ${i}`);
        assert.equal(e.version, i + 1);
        assert.deepEqual(e.headers, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
        assert.deepEqual(e.payload, { n: i });
        assert.equal(e.key, `Item:envelope-${i}`);
      }
    });

    it('three relays drain concurrently, with commits going on and one relay leaving midway: every event once, per-key order intact', async () => {
      const committed = new Map<string, string[]>();
      const keys = 24;
      const produce = async (round: number): Promise<void> => {
        await ns.transaction(async (tx) => {
          // Alternate one-event and many-event enqueues: both insert shapes keep order.
          const events = Array.from({ length: keys }, (_, k) => Item({ aggregateId: `order-${k}`, payload: { n: round }, version: round + 1 }));
          const ids = round % 2 === 0 ? await outbox.enqueue(tx, events) : (await Promise.all(events.map(async (e) => (await outbox.enqueue(tx, e))[0]!)));
          ids.forEach((id, k) => committed.set(`Item:order-${k}`, [...(committed.get(`Item:order-${k}`) ?? []), id]));
        });
      };
      for (let round = 0; round < 8; round++) await produce(round);
      const transport = new RecordingTransport({ latencyMs: 2, fail: (e, attempt) => (attempt === 1 && e.payload !== undefined && (e.payload as { n: number }).n % 3 === 1 ? new TransportError('retriable', 'timeout') : undefined) });
      const three = [relay(transport, { batchSize: 17 }), relay(transport, { batchSize: 23 }), relay(transport, { batchSize: 50 })];
      try {
        await Promise.all(three.map((r) => r.start()));
        for (let round = 8; round < 16; round++) {
          await produce(round);
          if (round === 11) await three[0]!.stop();
        }
        const total = keys * 16;
        await waitFor(`${total} events acked`, () => new Set(transport.acked.map((e) => e.id)).size >= total, 60_000);
      } finally {
        await stopAll();
      }
      const report = checkDeliveries(committed, transport.acked);
      assert.equal(report.lost, 0, `lost ${report.lost}`);
      assert.equal(report.phantom, 0);
      assert.equal(report.orderViolations, 0, `order violations ${report.orderViolations}`);
      assert.equal(transport.contractViolation, undefined);
      const states = await rowsOf([...committed.values()].flat());
      assert.ok(states.every((r) => r.state === 'published'), 'every row marked published');
    });

    it('the commit-order gap: an event committed late with an earlier position is published, after its key\'s earlier event', async (t) => {
      if (ns.noCommitOrderGap) return t.skip(ns.noCommitOrderGap);
      if (!ns.openTransaction) return t.skip('the store runs one transaction at a time');
      const transport = new RecordingTransport();
      await relay(transport).start();
      try {
        const [first] = await ns.transaction((tx) => outbox.enqueue(tx, Item({ aggregateId: 'gap-slow', payload: { n: 1 } })));
        const slow = await ns.openTransaction();
        const [late] = await outbox.enqueue(slow.tx, Item({ aggregateId: 'gap-slow', payload: { n: 2 } }));
        const [early] = await ns.transaction((tx) => outbox.enqueue(tx, Item({ aggregateId: 'gap-fast', payload: { n: 1 } })));
        await waitFor('the later position published while the earlier one is uncommitted', () => transport.acked.some((e) => e.id === early));
        await sleep(200); // several claims pass the gap
        await slow.commit();
        await waitFor('the late commit published', () => transport.acked.some((e) => e.id === late));
        const order = (await ns.rows()).map((r) => r.id);
        assert.ok(order.indexOf(late!) < order.indexOf(early!), 'the late transaction really held the earlier position');
        const acked = transport.acked.map((e) => e.id);
        assert.ok(acked.indexOf(first!) < acked.indexOf(late!), 'its key\'s earlier event went first');
      } finally {
        await stopAll();
      }
    });

    it('lease fencing: a relay whose lease expired, or was taken over, cannot mark; the new holder can', async () => {
      const ids = await ns.transaction((tx) => outbox.enqueue(tx, Array.from({ length: 5 }, (_, i) => Item({ aggregateId: `fence-${i}`, payload: { n: i } }))));
      const [a, b] = [ns.relayStore(), ns.relayStore()];
      stores.push(a, b);
      let leasesA: BucketLease[] = [];
      let leasesB: BucketLease[] = [];
      try {
        const { bucketCount } = await a.heartbeat({ relayId: 'fence-a', ...stats }, 600);
        leasesA = await a.lease('fence-a', [], bucketCount, 600);
        assert.equal(leasesA.length, bucketCount, 'alone, a relay takes every bucket');
        const claimed = (await a.claim(leasesA, { limit: 100, skipParkedDestinations: [] })).filter((e) => ids.includes(e.id));
        assert.equal(claimed.length, 5);
        const token = (seq: number, leases: readonly { bucket: number; token: string }[]) => leases.find((l) => l.bucket === claimed.find((e) => e.seq === seq)!.bucket)!.token;
        await sleep(900); // past the 600 ms lease on the database clock
        const expired = await a.complete('fence-a', claimed.slice(0, 2).map((e) => ({ seq: e.seq, token: token(e.seq, leasesA), outcome: 'published' as const })));
        assert.deepEqual(expired, { applied: 0, rejected: 2 }, 'an expired lease does not mark, even before another relay took it');

        await b.heartbeat({ relayId: 'fence-b', ...stats }, 60_000);
        leasesB = await b.lease('fence-b', [], bucketCount, 60_000);
        assert.equal(leasesB.length, bucketCount, 'b takes the expired buckets');
        const stale = await a.complete('fence-a', claimed.map((e) => ({ seq: e.seq, token: token(e.seq, leasesA), outcome: 'published' as const })));
        assert.deepEqual(stale, { applied: 0, rejected: 5 }, 'a stale token is fenced off');
        const parkStale = await a.complete('fence-a', claimed.map((e) => ({ seq: e.seq, token: token(e.seq, leasesA), outcome: 'park' as const, error: 'stale' })));
        assert.deepEqual(parkStale, { applied: 0, rejected: 5 }, 'parking with a stale token is fenced off too');
        assert.deepEqual((await a.lease('fence-a', leasesA, 0, 600)).length, 0, 'a renewal reports the leases lost');
        assert.ok((await rowsOf(ids)).every((r) => r.state === 'pending' && r.attempts === 0), 'the fenced-off marks changed nothing');

        const again = (await b.claim(leasesB, { limit: 100, skipParkedDestinations: [] })).filter((e) => ids.includes(e.id));
        assert.deepEqual(again.map((e) => e.id), ids, 'the new holder claims them, in order');
        const done = await b.complete('fence-b', again.map((e) => ({ seq: e.seq, token: token(e.seq, leasesB), outcome: 'published' as const })));
        assert.deepEqual(done, { applied: 5, rejected: 0 });
        assert.ok((await rowsOf(ids)).every((r) => r.state === 'published'));
      } finally {
        await a.leave('fence-a', leasesA);
        await b.leave('fence-b', leasesB);
        await stopAll();
      }
    });

    it('lease fencing of a large published batch that names its buckets: rows of a bucket taken over are not marked, the rest are; a bucket with two tokens in one mark is fenced per row', async () => {
      // More events than a small mark (a store may fence such a batch per bucket, as the PostgreSQL store does),
      // over many buckets, and four of one key (one bucket) to hold two tokens.
      const spread = Array.from({ length: 150 }, (_, i) => Item({ aggregateId: `wide-${i}`, payload: { n: i } }));
      const same = Array.from({ length: 4 }, (_, i) => Item({ aggregateId: 'wide-same', payload: { n: i } }));
      const ids = await ns.transaction((tx) => outbox.enqueue(tx, [...spread, ...same]));
      const [a, b] = [ns.relayStore(), ns.relayStore()];
      stores.push(a, b);
      let leasesA: BucketLease[] = [];
      let leasesB: BucketLease[] = [];
      try {
        const { bucketCount } = await a.heartbeat({ relayId: 'wide-a', ...stats }, 60_000);
        leasesA = await a.lease('wide-a', [], bucketCount, 60_000);
        const claimTokens = new Map(leasesA.map((l) => [l.bucket, l.token]));
        const claimed = (await a.claim(leasesA, { limit: 500, skipParkedDestinations: [] })).filter((e) => ids.includes(e.id));
        assert.equal(claimed.length, ids.length);
        const sameBucket = claimed.find((e) => e.id === ids[150])!.bucket;
        const tokenIn = (leases: readonly BucketLease[], bucket: number) => leases.find((l) => l.bucket === bucket)!.token;
        // b takes over half of the batch's other buckets: a gives them up, b leases what is free.
        const batchBuckets = [...new Set(claimed.map((e) => e.bucket))].filter((x) => x !== sameBucket);
        const moved = new Set(batchBuckets.filter((_, i) => i % 2 === 0));
        await a.release('wide-a', leasesA.filter((l) => moved.has(l.bucket)));
        await b.heartbeat({ relayId: 'wide-b', ...stats }, 60_000);
        leasesB = await b.lease('wide-b', [], moved.size, 60_000);
        assert.deepEqual(new Set(leasesB.map((l) => l.bucket)), moved, 'b holds the buckets a gave up');
        // a gives up the four events' bucket and takes it again: a new token.
        const oldToken = tokenIn(leasesA, sameBucket);
        await a.release('wide-a', leasesA.filter((l) => l.bucket === sameBucket));
        const kept = leasesA.filter((l) => !moved.has(l.bucket) && l.bucket !== sameBucket);
        leasesA = await a.lease('wide-a', kept, 1, 60_000);
        const newToken = tokenIn(leasesA, sameBucket);
        assert.notEqual(newToken, oldToken, 'a bucket leased again has a new token');

        // a marks the whole batch published, each row under the token it was claimed with, except the rows of
        // the four events' bucket: the first two under the old token, the others under the new one.
        const underOldToken = new Set(claimed.filter((e) => e.bucket === sameBucket).slice(0, 2).map((e) => e.id));
        const completions = claimed.map((e) => ({
          seq: e.seq,
          token: e.bucket === sameBucket ? (underOldToken.has(e.id) ? oldToken : newToken) : claimTokens.get(e.bucket)!,
          bucket: e.bucket,
          outcome: 'published' as const,
        }));
        const movedRows = claimed.filter((e) => moved.has(e.bucket)).length;
        const result = await a.complete('wide-a', completions);
        assert.deepEqual(result, { applied: ids.length - movedRows - 2, rejected: movedRows + 2 });
        const rows = new Map((await rowsOf(ids)).map((r) => [r.id, r]));
        for (const e of claimed) {
          const fenced = moved.has(e.bucket) || underOldToken.has(e.id);
          assert.equal(rows.get(e.id)!.state, fenced ? 'pending' : 'published', `${e.id} ${fenced ? 'fenced off' : 'marked'}`);
        }

        // The new holder marks the rows of its buckets, with their buckets named.
        const again = (await b.claim(leasesB, { limit: 500, skipParkedDestinations: [] })).filter((e) => ids.includes(e.id));
        assert.equal(again.length, movedRows);
        const done = await b.complete('wide-b', again.map((e) => ({ seq: e.seq, token: tokenIn(leasesB, e.bucket), bucket: e.bucket, outcome: 'published' as const })));
        assert.deepEqual(done, { applied: movedRows, rejected: 0 });
      } finally {
        await a.leave('wide-a', leasesA);
        await b.leave('wide-b', leasesB);
        await stopAll();
      }
    });

    it('a lease call hands back only the leases it renewed or acquired: a live bucket the relay owns but did not present is not returned unrenewed', async () => {
      const [a, b] = [ns.relayStore(), ns.relayStore()];
      stores.push(a, b);
      let again: BucketLease[] = [];
      let taken: BucketLease[] = [];
      try {
        const { bucketCount } = await a.heartbeat({ relayId: 'own-a', ...stats }, 60_000);
        const [one] = await a.lease('own-a', [], 1, 1000);
        assert.ok(one, 'a takes one bucket');
        // Not presented (released locally while its release is still on the way, or a restart under the same id):
        // handing it back without renewing it lets the relay trust it past the database's expiry.
        again = await a.lease('own-a', [], 0, 60_000);
        await sleep(1300); // past the 1 s lease on the database clock
        await b.heartbeat({ relayId: 'own-b', ...stats }, 60_000);
        taken = await b.lease('own-b', [], bucketCount, 60_000);
        const both = again.filter((l) => taken.some((t) => t.bucket === l.bucket)).map((l) => l.bucket);
        assert.deepEqual(both, [], 'no bucket is held by two relays at once');
      } finally {
        await a.leave('own-a', again);
        await b.leave('own-b', taken);
        await stopAll();
      }
    });

    it('leave frees only the leases it presents: a stale process of the same relay id leaving does not free the live one\'s buckets', async () => {
      const [stale, live, other] = [ns.relayStore(), ns.relayStore(), ns.relayStore()];
      stores.push(stale, live, other);
      let old: BucketLease[] = [];
      let current: BucketLease[] = [];
      try {
        const { bucketCount } = await stale.heartbeat({ relayId: 'same-id', ...stats }, 600);
        old = await stale.lease('same-id', [], bucketCount, 600);
        assert.equal(old.length, bucketCount);
        await sleep(900); // past the 600 ms lease: the process paused, and the relay id started again elsewhere
        await live.heartbeat({ relayId: 'same-id', ...stats }, 60_000);
        current = await live.lease('same-id', [], bucketCount, 60_000);
        assert.equal(current.length, bucketCount, 'the restarted relay takes every bucket, with new tokens');
        await stale.leave('same-id', old); // the paused process wakes up and stops
        await other.heartbeat({ relayId: 'other-id', ...stats }, 60_000);
        assert.deepEqual(await other.lease('other-id', [], bucketCount, 60_000), [], 'no bucket was freed for another relay');
        current = await live.lease('same-id', current, 0, 60_000);
        assert.equal(current.length, bucketCount, 'the live process keeps every lease');
      } finally {
        await live.leave('same-id', current);
        await other.leave('other-id', []); // alive otherwise, it would take a share of the buckets from later cases
        await stopAll();
      }
    });

    it('retries back off and keep the key in order, a poison event parks while other keys drain, and an operator skip or retry releases its key', async () => {
      const committed = new Map<string, string[]>();
      const ids = await ns.transaction(async (tx) => {
        const events = [];
        for (let round = 0; round < 3; round++) for (let k = 0; k < 20; k++) events.push(Item({ aggregateId: k === 0 ? 'poison' : `retry-${k}`, payload: { n: round } }));
        const written = await outbox.enqueue(tx, events);
        events.forEach((e, i) => committed.set(`Item:${e.aggregateId}`, [...(committed.get(`Item:${e.aggregateId}`) ?? []), written[i]!]));
        return written;
      });
      const [permanent, behindPermanent] = await ns.transaction((tx) => outbox.enqueue(tx, [Poison({ aggregateId: 'permanent', payload: { n: 0 } }), Item({ aggregateId: 'permanent', payload: { n: 1 } })]));
      const poisonHead = committed.get('Item:poison')![0]!;
      const poisonTimes: number[] = [];
      const transport = new RecordingTransport({
        fail: (e, attempt) => {
          if (e.id === poisonHead) {
            poisonTimes.push(performance.now());
            return new TransportError('retriable', 'HTTP 503');
          }
          if (e.id === permanent) return new TransportError('permanent', 'HTTP 400 bad request');
          return attempt === 1 ? new TransportError('retriable', 'timeout') : undefined;
        },
      });
      const r = relay(transport);
      await r.start();
      try {
        await waitFor('19 keys drained, poison and permanent parked', async () => (await rowsOf([poisonHead, permanent!])).every((row) => row.state === 'parked') && transport.acked.length >= 57);
        await sleep(200); // the parked keys must stay held
        assert.equal(transport.acked.filter((e) => e.key === 'Item:poison' || e.key === 'Item:permanent').length, 0, 'a parked event holds its key');
        const others = new Map([...committed].filter(([k]) => k !== 'Item:poison'));
        const report = checkDeliveries(others, transport.acked);
        assert.deepEqual([report.lost, report.orderViolations], [0, 0]);
        const [poisonRow, permanentRow] = await rowsOf([poisonHead, permanent!]);
        assert.equal(poisonRow!.attempts, 4, 'attempts are persisted');
        assert.match(poisonRow!.lastError ?? '', /HTTP 503/);
        assert.equal(transport.attempts.get(permanent!), 1, 'a permanent error parks at once');
        assert.match(permanentRow!.lastError ?? '', /HTTP 400/);
        // Equal jitter: retry n waits at least half of base * 2^(n-1) (40, 80, 160 ms), on the database clock; 5 ms of slack for timers.
        for (let n = 1; n < poisonTimes.length; n++) {
          assert.ok(poisonTimes[n]! - poisonTimes[n - 1]! >= (40 * 2 ** (n - 1)) / 2 - 5, `retry ${n} waited ${Math.round(poisonTimes[n]! - poisonTimes[n - 1]!)} ms`);
        }

        assert.deepEqual(await ns.skipParked([poisonHead]), [poisonHead]);
        assert.deepEqual(await ns.retryParked([permanent!]), [permanent]);
        await waitFor('the poison key released after the skip', () => transport.acked.filter((e) => e.key === 'Item:poison').length === 2);
        await waitFor('the permanent key retried, parked again, and its follower still held', async () => (await rowsOf([permanent!]))[0]!.state === 'parked' && transport.attempts.get(permanent!) === 2);
        assert.equal(transport.acked.some((e) => e.id === behindPermanent), false);
        assert.deepEqual(await ns.skipParked([permanent!]), [permanent]);
        await waitFor('the event behind the skipped one published', () => transport.acked.some((e) => e.id === behindPermanent));
        assert.deepEqual(transport.acked.filter((e) => e.key === 'Item:poison').map((e) => e.id), committed.get('Item:poison')!.slice(1));
        const states = new Map((await rowsOf(ids)).map((row) => [row.id, row.state]));
        assert.equal(states.get(poisonHead), 'skipped');
      } finally {
        await stopAll();
      }
    });

    it('with skipParkedDestinations, a parked event of that destination does not hold its key', async () => {
      const [parked, next] = await ns.transaction((tx) => outbox.enqueue(tx, [Poison({ aggregateId: 'skipdest', payload: { n: 0 } }), Item({ aggregateId: 'skipdest', payload: { n: 1 } })]));
      const transport = new RecordingTransport({ fail: (e) => (e.destination === 'poison' ? new TransportError('permanent', 'HTTP 400') : undefined) });
      await relay(transport, { skipParkedDestinations: ['poison'] }).start();
      try {
        await waitFor('the next event published past the parked one', () => transport.acked.some((e) => e.id === next));
        assert.equal((await rowsOf([parked!]))[0]!.state, 'parked');
      } finally {
        await stopAll();
      }
    });

    it('replay re-publishes published events with their ids, in their order', async () => {
      const committed = new Map<string, string[]>();
      await ns.transaction(async (tx) => {
        const events = Array.from({ length: 12 }, (_, i) => Stock({ aggregateId: `replay-${i % 3}`, payload: { quantity: i } }));
        const ids = await outbox.enqueue(tx, events);
        events.forEach((e, i) => committed.set(`Sku:${e.aggregateId}`, [...(committed.get(`Sku:${e.aggregateId}`) ?? []), ids[i]!]));
      });
      const transport = new RecordingTransport();
      await relay(transport).start();
      try {
        const ids = [...committed.values()].flat();
        await waitFor('12 marked published', async () => (await rowsOf(ids)).every((r) => r.state === 'published')); // acked comes before the mark
        assert.equal(await ns.replay('stock'), 12);
        await waitFor('12 replayed', () => transport.acked.length === 24);
        const replayed = transport.acked.slice(12);
        const report = checkDeliveries(committed, replayed);
        assert.deepEqual([report.lost, report.phantom, report.duplicates, report.orderViolations], [0, 0, 0, 0]);
      } finally {
        await stopAll();
      }
    });

    it('retention deletes finished rows in bounded batches, never pending or parked ones', async () => {
      const probe = ns.relayStore();
      stores.push(probe);
      try {
        assert.equal(typeof probe.prune, 'function', 'the relay store prunes (retention)');
        const [pending] = await ns.transaction((tx) => outbox.enqueue(tx, Item({ aggregateId: 'retention-pending', payload: { n: 0 } })));
        const before = await ns.rows();
        const finished = before.filter((r) => r.state === 'published' || r.state === 'skipped').length;
        const kept = before.filter((r) => r.state === 'pending' || r.state === 'parked').map((r) => r.id);
        assert.ok(finished > 10 && kept.length >= 2, `earlier cases left finished (${finished}) and kept (${kept.length}) rows`);
        assert.equal(await probe.prune!(3_600_000, 1000), 0, 'nothing finished an hour ago');
        await sleep(20);
        assert.equal(await probe.prune!(1, 3), 3, 'one batch at most');
        let deleted = 3;
        for (let n = await probe.prune!(1, 1000); n > 0; n = await probe.prune!(1, 1000)) deleted += n;
        assert.equal(deleted, finished);
        const after = await ns.rows();
        assert.deepEqual(after.map((r) => r.id).sort(), kept.sort(), 'pending and parked rows stay');
        assert.ok(after.some((r) => r.id === pending));
      } finally {
        await stopAll();
      }
    });

    it('inbox: a redelivered event runs its handler once, the handler effect commits with the inbox row, a failed handler leaves no effect', async (t) => {
      if (!ns.inboxStore) return t.skip('the store has no inbox');
      const inbox = createInbox<Tx>({ store: ns.inboxStore, consumer: 'conformance-once', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 20, maxAttempts: 2 } });
      inbox.on(Stock, async (event, tx) => {
        await ns.recordEffect(tx, `inbox-${event.id}`);
        if (event.payload.quantity < 0) throw new Error('negative stock');
      });
      try {
        const e = stockEvent('inbox-a', 1, 5);
        const outcomes = [];
        for (let i = 0; i < 3; i++) outcomes.push((await inbox.process(e)).status);
        assert.deepEqual(outcomes, ['processed', 'duplicate', 'duplicate']);
        assert.equal(await ns.countEffects(`inbox-${e.id}`), 1);
        const bad = stockEvent('inbox-b', 1, -1);
        const failed = await inbox.process(bad);
        assert.equal(failed.status, 'retry');
        assert.equal(await ns.countEffects(`inbox-${bad.id}`), 0, 'the failed handler rolled back its write');
        assert.equal((await inbox.process(bad)).status, 'dead');
        assert.equal((await inbox.process(bad)).status, 'duplicate', 'a dead event is not run again by a redelivery');
        if (ns.openTransaction) {
          const c = stockEvent('inbox-c', 1, 5);
          const concurrent = await Promise.all(Array.from({ length: 5 }, () => inbox.process(c)));
          assert.equal(concurrent.filter((o) => o.status === 'processed').length, 1, 'concurrent redeliveries: one runs');
          assert.equal(await ns.countEffects(`inbox-${c.id}`), 1);
        } else t.diagnostic('concurrent redeliveries not checked: the store runs one transaction at a time');
      } finally {
        await inbox.stop();
      }
    });

    it('inbox: a rollback leaves neither the handler effect nor the mark; the redelivery runs the handler again and commits both once, in a batch too', async (t) => {
      if (!ns.inboxStore) return t.skip('the store has no inbox');
      const failing = new Set<string>();
      const runs = new Map<string, number>();
      const inbox = createInbox<Tx>({ store: ns.inboxStore, consumer: 'conformance-rollback', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 20, maxAttempts: 5 } });
      inbox.on(Stock, async (event, tx) => {
        runs.set(event.id, (runs.get(event.id) ?? 0) + 1);
        await ns.recordEffect(tx, `rollback-${event.id}`);
        if (failing.has(event.id)) throw new Error('fails after its write');
      });
      try {
        const e = stockEvent('rollback-a', 1, 1);
        failing.add(e.id);
        assert.equal((await inbox.process(e)).status, 'retry');
        assert.equal(await ns.countEffects(`rollback-${e.id}`), 0, 'the write before the failure rolled back');
        failing.delete(e.id);
        assert.equal((await inbox.process(e)).status, 'processed', 'not marked processed by the rolled-back run');
        assert.equal((await inbox.process(e)).status, 'duplicate');
        assert.equal(await ns.countEffects(`rollback-${e.id}`), 1);
        assert.equal(runs.get(e.id), 2);
        // Many at once share a transaction (group commit): one failure redoes the batch one event at a time.
        const batch = Array.from({ length: 8 }, (_, i) => stockEvent(`rollback-batch-${i}`, null, i));
        failing.add(batch[3]!.id);
        const outcomes = await Promise.all(batch.map((b) => inbox.process(b)));
        failing.delete(batch[3]!.id);
        assert.deepEqual(outcomes.map((o) => o.status), ['processed', 'processed', 'processed', 'retry', 'processed', 'processed', 'processed', 'processed']);
        for (const b of batch) assert.equal(await ns.countEffects(`rollback-${b.id}`), b === batch[3] ? 0 : 1, `effects of ${b.aggregateId}`);
        assert.deepEqual((await Promise.all(batch.map((b) => inbox.process(b)))).map((o) => o.status), ['duplicate', 'duplicate', 'duplicate', 'processed', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
        assert.equal(await ns.countEffects(`rollback-${batch[3]!.id}`), 1);
      } finally {
        await inbox.stop();
      }
    });

    it('inbox: an id redelivered in another UUID spelling (upper case, braces, no hyphens) is the same event', async (t) => {
      if (!ns.inboxStore) return t.skip('the store has no inbox');
      const seen: string[] = [];
      const inbox = createInbox<Tx>({ store: ns.inboxStore, consumer: 'conformance-spelling', autoStart: false, metrics: false });
      inbox.on(Stock, async (event, tx) => {
        seen.push(event.id);
        await ns.recordEffect(tx, `spelling-${event.id.toLowerCase()}`);
      });
      try {
        const e = stockEvent('spelling', 1, 1);
        assert.equal((await inbox.process({ ...e, id: e.id.toUpperCase() })).status, 'processed');
        for (const id of [e.id, `{${e.id}}`, e.id.replace(/-/g, ''), e.id.toUpperCase()]) assert.equal((await inbox.process({ ...e, id })).status, 'duplicate', id);
        assert.deepEqual(seen, [e.id], 'the handler ran once, with the canonical id');
        assert.equal(await ns.countEffects(`spelling-${e.id}`), 1);
      } finally {
        await inbox.stop();
      }
    });

    it('inbox: held versions of a key wait behind the missing one and then apply in version order, other keys unaffected', async (t) => {
      if (!ns.inboxStore || !ns.applyVersioned || !ns.readProjection) return t.skip('the store has no inbox or projections');
      const apply = ns.applyVersioned.bind(ns);
      const applied: string[] = [];
      const inbox = createInbox<Tx>({ store: ns.inboxStore, consumer: 'conformance-held-order', autoStart: false, metrics: false });
      inbox.on(Stock, async (event, tx) => {
        await apply(tx, { id: event.aggregateId, version: event.version!, quantity: event.payload.quantity, onGap: 'hold' });
        applied.push(`${event.aggregateId}@${event.version}`);
      });
      try {
        assert.equal((await inbox.process(stockEvent('held-a', 1, 1))).status, 'processed');
        for (const v of [5, 3, 4]) assert.equal((await inbox.process(stockEvent('held-a', v, v))).status, 'held', `v${v} waits for v2`);
        assert.equal((await inbox.process(stockEvent('held-b', 1, 1))).status, 'processed', 'another key flows');
        assert.deepEqual(await ns.readProjection('held-a'), { quantity: 1, version: 1 });
        assert.equal((await inbox.process(stockEvent('held-a', 2, 2))).status, 'processed');
        assert.deepEqual(await ns.readProjection('held-a'), { quantity: 5, version: 5 }, 'v2 released v3, v4, v5');
        assert.deepEqual(applied.filter((a) => a.startsWith('held-a')), ['held-a@1', 'held-a@2', 'held-a@3', 'held-a@4', 'held-a@5']);
      } finally {
        await inbox.stop();
      }
    });

    it('inbox: a dead event is kept with its reason, listed, and runs again after an operator retry (redrive)', async (t) => {
      if (!ns.inboxStore || !ns.listDead || !ns.retryDead) return t.skip('the store has no inbox admin');
      let broken = true;
      const inbox = createInbox<Tx>({ store: ns.inboxStore, consumer: 'conformance-dead', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 } });
      inbox.on(Stock, async (event, tx) => {
        await ns.recordEffect(tx, `dead-${event.id}`);
        if (broken) throw new Error('downstream says no');
      });
      try {
        const e = stockEvent('dead-a', null, 1);
        assert.equal((await inbox.process(e)).status, 'retry');
        const dead = await inbox.process(e);
        assert.equal(dead.status, 'dead');
        assert.match((dead as { error: string }).error, /downstream says no/);
        assert.deepEqual(await ns.listDead('conformance-dead'), [e.id]);
        assert.equal((await inbox.process(e)).status, 'duplicate', 'a redelivery of a dead event does not run it');
        broken = false;
        assert.deepEqual(await ns.retryDead('conformance-dead'), [e.id]);
        assert.equal(await inbox.redrive(), 1);
        assert.deepEqual(await ns.listDead('conformance-dead'), []);
        assert.equal(await ns.countEffects(`dead-${e.id}`), 1);
        assert.equal((await inbox.process(e)).status, 'duplicate');
      } finally {
        await inbox.stop();
      }
    });

    it('inbox: operator retries of a type this process has no handler for do not keep the others from running', async (t) => {
      if (!ns.inboxStore || !ns.listDead || !ns.retryDead) return t.skip('the store has no inbox admin');
      // A deploy that dropped a type's handler leaves its retried events waiting; a page of them must not hide the rest.
      const options = { store: ns.inboxStore, consumer: 'conformance-orphan', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 1 } } as const;
      const before = createInbox<Tx>(options);
      before.on('Retired', async () => {
        throw new Error('retired');
      });
      before.on(Stock, async () => {
        throw new Error('downstream says no');
      });
      const retired = Array.from({ length: 100 }, (_, i) => ({ ...stockEvent(`a-orphan-${String(i).padStart(3, '0')}`, null, i), type: 'Retired' }));
      const kept = stockEvent('z-orphan', null, 1);
      const after = createInbox<Tx>(options);
      after.on(Stock, async (event, tx) => {
        await ns.recordEffect(tx, `orphan-${event.id}`);
      });
      try {
        for (const e of [...retired, kept]) assert.equal((await before.process(e)).status, 'dead');
        assert.equal((await ns.retryDead('conformance-orphan')).length, 101);
        assert.equal(await after.redrive(), 1, 'the one retried event with a handler ran');
        assert.equal(await ns.countEffects(`orphan-${kept.id}`), 1);
        assert.equal(await after.redrive(), 0, 'the others wait for a process that handles them');
      } finally {
        await before.stop();
        await after.stop();
      }
    });

    it('version-guarded projections: stale versions change nothing, a gap is held until the missing version arrives, or applied and reported', async (t) => {
      if (!ns.inboxStore || !ns.applyVersioned || !ns.readProjection) return t.skip('the store has no inbox or projections');
      const store = ns.inboxStore;
      const apply = ns.applyVersioned.bind(ns);
      const read = ns.readProjection.bind(ns);
      const results: string[] = [];
      const inbox = createInbox<Tx>({ store, consumer: 'conformance-projection', autoStart: false, metrics: false });
      inbox.on(Stock, async (event, tx) => {
        const r = await apply(tx, { id: event.aggregateId, version: event.version!, quantity: event.payload.quantity, onGap: 'hold' });
        results.push(`${event.version}:${r.status}`);
      });
      const report = createInbox<Tx>({ store, consumer: 'conformance-gap-report', autoStart: false, metrics: false });
      const gaps: ConformanceProjectionResult[] = [];
      report.on(Stock, async (event, tx) => {
        gaps.push(await apply(tx, { id: event.aggregateId, version: event.version!, quantity: 1, onGap: 'apply' }));
      });
      try {
        assert.equal((await inbox.process(stockEvent('sku1', 1, 10))).status, 'processed');
        assert.equal((await inbox.process(stockEvent('sku1', 3, 30))).status, 'held', 'v3 waits for v2');
        assert.deepEqual(await read('sku1'), { quantity: 10, version: 1 });
        assert.equal((await inbox.process(stockEvent('sku1', 2, 20))).status, 'processed');
        assert.deepEqual(await read('sku1'), { quantity: 30, version: 3 }, 'v2, then the held v3, applied');
        assert.equal((await inbox.process(stockEvent('sku1', 2, 99))).status, 'processed', 'an old version with a new id runs');
        assert.ok(results.includes('2:stale'), results.join(' '));
        assert.deepEqual(await read('sku1'), { quantity: 30, version: 3 }, 'but changes nothing');
        await report.process(stockEvent('sku9', 4, 1));
        assert.deepEqual(gaps[0], { status: 'gap', missing: [1, 3] });
        assert.deepEqual(await read('sku9'), { quantity: 1, version: 4 });
      } finally {
        await inbox.stop();
        await report.stop();
      }
    });
  });
}
