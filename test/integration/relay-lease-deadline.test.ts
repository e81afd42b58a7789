/**
 * A relay that lost its lease must stop publishing (issue 11 item 6): no send
 * starts after the local lease deadline and sends in flight are aborted at it,
 * so a relay cut off from its lease renewals cannot deliver a key's event
 * after the relay that took the bucket over delivered that key.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import {
  ConfigError,
  createOutbox,
  createRelay,
  defineEvent,
  payloadType,
  type OutboxEvent,
  type PublishOutcome,
  type RelayStore,
  type Transport,
} from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

interface Delivery {
  readonly relay: 'A' | 'B';
  readonly id: string;
  readonly key: string;
}

/** Fault injection around the real store: once `cut`, `lease()` never answers (until `heal()`, for teardown). */
class HangingLeaseStore implements RelayStore {
  cut = false;
  /** lease() calls now hanging. */
  get hanging(): number {
    return this.#hung.length;
  }
  /** performance.now() when the last lease() that answered was sent. */
  lastLeaseSentAt = 0;
  readonly #hung: (() => void)[] = [];
  constructor(private readonly inner: PostgresRelayStore) {}
  async lease(relayId: string, held: Parameters<RelayStore['lease']>[1], acquire: number, ttlMs: number) {
    if (this.cut) {
      await new Promise<void>((_, reject) => this.#hung.push(() => reject(new Error('lease hung (test teardown)'))));
    }
    const sentAt = performance.now();
    const result = await this.inner.lease(relayId, held, acquire, ttlMs);
    this.lastLeaseSentAt = sentAt;
    return result;
  }
  heal(): void {
    for (const fail of this.#hung.splice(0)) fail();
  }
  heartbeat: RelayStore['heartbeat'] = (r, t) => this.inner.heartbeat(r, t);
  release: RelayStore['release'] = (r, l) => this.inner.release(r, l);
  leave: RelayStore['leave'] = (r, h) => this.inner.leave(r, h);
  claim: RelayStore['claim'] = (l, o) => this.inner.claim(l, o);
  complete: RelayStore['complete'] = (r, c) => this.inner.complete(r, c);
  waitForEvents: RelayStore['waitForEvents'] = (t, s, since) => this.inner.waitForEvents(t, s, since);
  wakeups = (): number => this.inner.wakeups();
  close = (): Promise<void> => this.inner.close();
}

/**
 * Relay A's transport: 40 ms per call while its lease is fresh; a call that
 * starts close to A's lease deadline (by the store wrapper's clock) is slow:
 * it delivers only once relay B has delivered the same key, or never if its
 * signal aborts first (an aborted request that did not reach the broker).
 */
class SlowNearDeadlineTransport implements Transport {
  readonly name = 'slow-a';
  /** Slow calls whose signal aborted before they could deliver. */
  aborted = 0;
  constructor(
    private readonly log: Delivery[],
    private readonly slowFrom: () => number,
  ) {}
  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    signal.throwIfAborted();
    const slow = performance.now() >= this.slowFrom();
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        clearInterval(timer);
        this.aborted++;
        reject(signal.reason);
      };
      const started = performance.now();
      const timer = setInterval(() => {
        const ready = slow ? events.every((e) => this.log.some((d) => d.relay === 'B' && d.key === e.key)) : performance.now() - started >= 40;
        if (!ready) return;
        clearInterval(timer);
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, 10);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    for (const e of events) this.log.push({ relay: 'A', id: e.id, key: e.key });
    return events.map(() => ({ ok: true }));
  }
  async close(): Promise<void> {}
}

class FastTransport implements Transport {
  readonly name = 'fast-b';
  constructor(private readonly log: Delivery[]) {}
  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    for (const e of events) this.log.push({ relay: 'B', id: e.id, key: e.key });
    return events.map(() => ({ ok: true }));
  }
  async close(): Promise<void> {}
}

describe('relay: lease deadline', () => {
  let db: TestDb;
  before(async () => {
    db = await openDb('postgres');
  });
  after(async () => {
    await db.close();
  });

  it('rejects a publishTimeoutMs that cannot fit inside the lease, naming the option and the fix', () => {
    const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
    const transport = new FastTransport([]);
    assert.throws(
      () => createRelay({ store, transport, leaseTtlMs: 10_000, publishTimeoutMs: 30_000 }),
      (e: unknown) =>
        e instanceof ConfigError &&
        e.field === 'publishTimeoutMs' &&
        /at most 8000 ms/.test(e.message) &&
        /Set publishTimeoutMs to 8000 or less, or leaseTtlMs to \d+ or more/.test(e.message),
    );
    assert.throws(() => createRelay({ store, transport, publishTimeoutMs: 30_000 }), /publishTimeoutMs: 30000 ms does not fit inside the lease/);
    assert.equal(createRelay({ store, transport }).options.publishTimeoutMs, 28_000);
    assert.equal(createRelay({ store, transport, leaseTtlMs: 3000 }).options.publishTimeoutMs, 2400);
    assert.equal(createRelay({ store, transport, leaseTtlMs: 500 }).options.publishTimeoutMs, 400);
    assert.equal(createRelay({ store, transport, leaseTtlMs: 60_000, publishTimeoutMs: 30_000 }).options.publishTimeoutMs, 30_000);
  });

  it('a relay whose lease renewal hangs sends nothing after its local deadline: the next owner sees no key reordered', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
    const committed = new Map<string, string[]>();
    for (let i = 0; i < 300; i++) {
      const ids = await db.transaction((tx) => outbox.enqueue(tx, Array.from({ length: 4 }, (_, k) => OrderCreated({ aggregateId: k, payload: { n: i } }))));
      ids.forEach((id, k) => committed.set(`Order:${k}`, [...(committed.get(`Order:${k}`) ?? []), id]));
    }
    const log: Delivery[] = [];
    const ttlA = 10_000;
    const storeA = new HangingLeaseStore(new PostgresRelayStore({ schema: db.schema, connection: db.connection }));
    // A's local deadline is (lease sent + ttl - 2000 ms margin); calls that start in its last 400 ms are slow.
    const slowFrom = (): number => (storeA.cut ? storeA.lastLeaseSentAt + ttlA - 2000 - 400 : Infinity);
    const transportA = new SlowNearDeadlineTransport(log, slowFrom);
    const relayA = createRelay({
      store: storeA,
      transport: transportA,
      relayId: 'relay-a',
      leaseTtlMs: ttlA,
      publishTimeoutMs: 4600,
      pollIntervalMs: 20,
      batchSize: 100,
      lanes: 1,
    });
    const relayB = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport: new FastTransport(log),
      relayId: 'relay-b',
      leaseTtlMs: 1500,
      pollIntervalMs: 20,
    });
    let leftByA = 0;
    relayA.on('leaseEnded', (e) => {
      leftByA += e.left;
    });
    await relayA.start();
    storeA.cut = true; // every later lease renewal of A hangs; its claims and marks still work
    await relayB.start();
    try {
      await waitFor('every event delivered', () => checkDeliveries(committed, log).lost === 0, 60_000);
      // Let a send that A still had in flight land, if it was going to.
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      storeA.heal();
      await relayB.stop();
      await relayA.abort();
    }
    const lateA: string[] = [];
    for (const key of committed.keys()) {
      const firstB = log.findIndex((d) => d.relay === 'B' && d.key === key);
      const afterB = log.slice(firstB + 1).filter((d) => d.relay === 'A' && d.key === key);
      if (firstB >= 0 && afterB.length > 0) lateA.push(`${key}: ${afterB.length} sent by A after B took over`);
    }
    assert.deepEqual(lateA, [], 'deliveries of the old owner after the new owner delivered the key');
    const report = checkDeliveries(committed, log);
    assert.equal(report.lost, 0);
    assert.equal(report.orderViolations, 0);
    assert.ok(log.some((d) => d.relay === 'A') && log.some((d) => d.relay === 'B'), 'both relays delivered');
    assert.ok(transportA.aborted >= 1, 'a slow call of A was in flight at its deadline and was aborted');
    assert.ok(leftByA >= 1, 'A reported the events it left pending when its lease ended');
  });

  it('stop() does not wait forever for a lease renewal that hangs: it gives up after stopTimeoutMs', async () => {
    const store = new HangingLeaseStore(new PostgresRelayStore({ schema: db.schema, connection: db.connection }));
    const relay = createRelay({ store, transport: new FastTransport([]), leaseTtlMs: 600, pollIntervalMs: 20, stopTimeoutMs: 200 });
    await relay.start();
    store.cut = true;
    await waitFor('a lease renewal hanging', () => store.hanging > 0);
    try {
      const outcome = await Promise.race([relay.stop().then(() => 'stopped'), new Promise((r) => setTimeout(r, 15_000, 'still waiting after 15 s'))]);
      assert.equal(outcome, 'stopped');
    } finally {
      store.heal();
      await relay.stop();
    }
  });
});
