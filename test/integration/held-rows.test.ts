/**
 * Rows queued behind a blocked event (migration 005): the claim does not
 * visit them, and per-key order holds exactly as before. Store-level, so
 * that each step (claim, complete, the CLI's parked actions) is explicit.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType, type BucketLease, type Completion, type Outbox } from 'txbox';
import { migratePostgres, PostgresAdmin, postgresMigrations, postgresNames, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const RELAY = 'held-rows-test';
const ALL = { limit: 100, skipParkedDestinations: [] as string[] };

interface Row {
  seq: string;
  key: string;
  held_by: string | null;
}

for (const kind of BACKENDS) {
  describe(`held rows on ${kind}`, () => {
    let db: TestDb;
    let outbox: Outbox;
    before(async () => {
      db = await openDb(kind);
      outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
    });
    after(async () => {
      await db.close();
    });

    const table = (): string => `"${db.schema}".outbox`;

    /** A fresh outbox with `perKey` events on each of keys A and B (A's first), all buckets leased to one store. */
    async function fresh(perKey: number, options: { deleteOnPublish?: boolean; releaseHeldEveryMs?: number } = {}) {
      await db.query(`TRUNCATE ${table()}`);
      await db.query(`UPDATE "${db.schema}".outbox_buckets SET owner = NULL, lease_until = NULL`);
      await db.transaction(async (tx) => {
        const events = [];
        for (const k of ['A', 'B']) for (let i = 0; i < perKey; i++) events.push(OrderCreated({ aggregateId: k, payload: { n: i } }));
        await outbox.enqueue(tx, events);
      });
      const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection, releaseHeldEveryMs: 3_600_000, ...options });
      const leases = await store.lease(RELAY, [], 256, 600_000);
      assert.equal(leases.length, 256);
      const rows = await db.query<Row>(`SELECT o.seq::text, o.key, o.held_by::text FROM ${table()} o ORDER BY o.seq`);
      const seqs = (key: string): number[] => rows.filter((r) => r.key === `Order:${key}`).map((r) => Number(r.seq));
      return { store, leases, a: seqs('A'), b: seqs('B') };
    }

    function tokenOf(leases: readonly BucketLease[], bucket: number): string {
      return leases.find((l) => l.bucket === bucket)!.token;
    }

    async function completeOne(store: PostgresRelayStore, leases: readonly BucketLease[], seq: number, outcome: 'published' | 'retry' | 'park') {
      const [row] = await db.query<{ bucket: number }>(`SELECT bucket FROM ${table()} WHERE seq = $1`, [seq]);
      const token = tokenOf(leases, row!.bucket);
      const c: Completion =
        outcome === 'published'
          ? { seq, token, outcome }
          : outcome === 'retry'
            ? { seq, token, outcome, delayMs: 3_600_000, error: 'broker down' }
            : { seq, token, outcome, error: 'rejected' };
      const r = await store.complete(RELAY, [c]);
      assert.equal(r.applied, 1, `complete ${outcome} of ${seq} applied`);
    }

    const claimed = async (store: PostgresRelayStore, leases: readonly BucketLease[], skip: string[] = []): Promise<number[]> =>
      (await store.claim(leases, { ...ALL, skipParkedDestinations: skip })).map((e) => e.seq);

    const heldBy = async (): Promise<Map<number, number | null>> =>
      new Map((await db.query<Row>(`SELECT o.seq::text, o.key, o.held_by::text FROM ${table()} o ORDER BY o.seq`)).map((r) => [Number(r.seq), r.held_by === null ? null : Number(r.held_by)]));

    for (const deleteOnPublish of [false, true]) {
      it(`a key blocked by backoff stays blocked until its head is published, then flows in order${deleteOnPublish ? ' (deleteOnPublish)' : ''}`, async () => {
        const { store, leases, a, b } = await fresh(4, { deleteOnPublish });
        assert.deepEqual(await claimed(store, leases), [...a, ...b]);
        await completeOne(store, leases, a[0]!, 'retry');
        // The rows behind A's head are held by it; B's are not.
        const held = await heldBy();
        assert.deepEqual(a.slice(1).map((s) => held.get(s)), [a[0], a[0], a[0]]);
        assert.deepEqual(b.map((s) => held.get(s)), [null, null, null, null]);
        assert.deepEqual(await claimed(store, leases), b, 'A is blocked while its head backs off');
        // The head's backoff ends: the head alone is claimable; its followers wait for its publish.
        await db.query(`UPDATE ${table()} SET next_attempt_at = now() - interval '1 second' WHERE seq = $1`, [a[0]]);
        assert.deepEqual(await claimed(store, leases), [a[0], ...b]);
        await completeOne(store, leases, a[0]!, 'published');
        assert.deepEqual([...(await heldBy()).values()].filter((h) => h !== null), [], 'publishing the head released its key');
        assert.deepEqual(await claimed(store, leases), [...a.slice(1), ...b], 'then A flows in order');
      });
    }

    for (const deleteOnPublish of [false, true]) {
      it(`a head published in a large batch that names its buckets (fenced per bucket) releases its key${deleteOnPublish ? ' (deleteOnPublish)' : ''}`, async () => {
        const { store, leases, a, b } = await fresh(70, { deleteOnPublish });
        await completeOne(store, leases, a[0]!, 'retry');
        await db.query(`UPDATE ${table()} SET next_attempt_at = now() - interval '1 second' WHERE seq = $1`, [a[0]]);
        const batch = await store.claim(leases, ALL);
        assert.deepEqual(batch.map((e) => e.seq), [a[0], ...b]);
        const r = await store.complete(RELAY, batch.map((e) => ({ seq: e.seq, token: tokenOf(leases, e.bucket), bucket: e.bucket, outcome: 'published' as const })));
        assert.deepEqual(r, { applied: 71, rejected: 0 });
        assert.deepEqual([...(await heldBy()).values()].filter((h) => h !== null), [], 'publishing the head released its key');
        assert.deepEqual(await claimed(store, leases), a.slice(1), 'then A flows in order');
      });
    }

    it('a head that fails again keeps its key held; a later event that arrives while blocked is held at the next failure', async () => {
      const { store, leases, a, b } = await fresh(2);
      await completeOne(store, leases, a[0]!, 'retry');
      await db.transaction((tx) => outbox.enqueue(tx, [OrderCreated({ aggregateId: 'A', payload: { n: 9 } })]));
      const [late] = await db.query<{ seq: string }>(`SELECT max(seq)::text AS seq FROM ${table()} WHERE key = 'Order:A'`);
      const lateSeq = Number(late!.seq);
      // Not held yet, but the claim's own check still keeps it back.
      assert.equal((await heldBy()).get(lateSeq), null);
      assert.deepEqual(await claimed(store, leases), b);
      await db.query(`UPDATE ${table()} SET next_attempt_at = now() - interval '1 second' WHERE seq = $1`, [a[0]]);
      // The head alone: the late event must not overtake a[1], which is held.
      assert.deepEqual(await claimed(store, leases), [a[0]!, ...b]);
      await completeOne(store, leases, a[0]!, 'retry');
      assert.equal((await heldBy()).get(lateSeq), a[0]);
      assert.deepEqual(await claimed(store, leases), b);
    });

    it('a parked head blocks its key; a relay that skips its destination releases and claims the rest', async () => {
      const { store, leases, a, b } = await fresh(3);
      await completeOne(store, leases, a[0]!, 'park');
      const h = await heldBy();
      assert.deepEqual(a.slice(1).map((s) => h.get(s)), [a[0], a[0]]);
      assert.deepEqual(await claimed(store, leases), b, 'a parked head blocks its key');
      // Another relay configured with skipParkedDestinations: ['orders'] releases the rows on its first claim.
      const skipping = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
      assert.deepEqual(await claimed(skipping, leases, ['orders']), [...a.slice(1), ...b]);
      assert.deepEqual([...(await heldBy()).values()].filter((x) => x !== null), []);
      // And a relay that skips it does not hold rows behind an event it parks for that destination.
      await completeOne(skipping, leases, a[1]!, 'park');
      assert.deepEqual([...(await heldBy()).values()].filter((x) => x !== null), []);
      assert.deepEqual(await claimed(skipping, leases, ['orders']), [a[2]!, ...b]);
    });

    for (const action of ['retry', 'skip', 'discard'] as const) {
      it(`the CLI's parked ${action} releases the key held behind the parked event`, async () => {
        const { store, leases, a, b } = await fresh(3);
        await completeOne(store, leases, a[0]!, 'park');
        assert.deepEqual(await claimed(store, leases), b);
        const [head] = await db.query<{ id: string }>(`SELECT id FROM ${table()} WHERE seq = $1`, [a[0]]);
        const admin = new PostgresAdmin(db.connection, { schema: db.schema });
        const selector = { ids: [head!.id] };
        const changed =
          action === 'retry' ? await admin.retryParked(selector, 'test') : action === 'skip' ? await admin.skipParked(selector, 'test') : await admin.discardParked(selector, 'test');
        assert.deepEqual(changed, [head!.id]);
        assert.deepEqual([...(await heldBy()).values()].filter((x) => x !== null), [], `${action} released the held rows`);
        assert.deepEqual(await claimed(store, leases), action === 'retry' ? [...a, ...b] : [...a.slice(1), ...b]);
      });
    }

    it('rows held by a blocker that an older txbox ended are released by the claim within releaseHeldEveryMs', async () => {
      const { store, leases, a, b } = await fresh(3);
      assert.deepEqual(await claimed(store, leases), [...a, ...b], 'the first claim ran the release (nothing to release)');
      await completeOne(store, leases, a[0]!, 'retry');
      // A statement that does not know held_by ends the blocker (a relay of version 4 during a rolling upgrade).
      await db.query(`UPDATE ${table()} SET state = 'published', next_attempt_at = NULL, done_at = now() WHERE seq = $1`, [a[0]]);
      assert.deepEqual(await claimed(store, leases), b, 'held until the release runs');
      assert.equal(await store.releaseHeld(), 2);
      assert.deepEqual(await claimed(store, leases), [...a.slice(1), ...b]);
      const eager = new PostgresRelayStore({ schema: db.schema, connection: db.connection, releaseHeldEveryMs: 0 });
      await completeOne(store, leases, a[1]!, 'retry');
      await db.query(`UPDATE ${table()} SET state = 'published', next_attempt_at = NULL, done_at = now() WHERE seq = $1`, [a[1]]);
      assert.deepEqual(await claimed(eager, leases), [a[2]!, ...b]);
    });

    it('a failing hold loses nothing: the complete stays applied and the claim still keeps the key blocked', async () => {
      const schema = `${db.schema}_nohold`;
      const names = postgresNames({ schema });
      try {
        await migratePostgres(db.connection, names);
        await db.query(`DROP FUNCTION "${schema}".outbox_hold`);
        const t = `"${schema}".outbox`;
        await db.query(
          `INSERT INTO ${t} (id, type, aggregate_type, aggregate_id, key, destination, payload) SELECT gen_random_uuid(), 'T', 'A', k, k, 'd', '{}' FROM unnest(ARRAY['A', 'A', 'B']) AS k`,
        );
        const store = new PostgresRelayStore({ schema, connection: db.connection });
        const leases = await store.lease(RELAY, [], 256, 600_000);
        const events = await store.claim(leases, ALL);
        assert.deepEqual(events.map((e) => e.key), ['A', 'A', 'B']);
        const head = events[0]!;
        const r = await store.complete(RELAY, [{ seq: head.seq, token: tokenOf(leases, head.bucket), outcome: 'retry', delayMs: 3_600_000, error: 'down' }]);
        assert.deepEqual(r, { applied: 1, rejected: 0 });
        const rows = await db.query<{ n: number }>(`SELECT count(held_by)::int AS n FROM ${t}`);
        assert.equal(rows[0]!.n, 0, 'nothing held: the hold failed');
        assert.deepEqual((await store.claim(leases, ALL)).map((e) => e.key), ['B'], 'A stays blocked by the claim itself');
      } finally {
        await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    });

    it('rejects a bad releaseHeldEveryMs naming the field', () => {
      assert.throws(() => new PostgresRelayStore({ schema: db.schema, connection: db.connection, releaseHeldEveryMs: -1 }), /releaseHeldEveryMs: must be a whole number/);
    });

    it('migration 005 holds the rows already queued behind parked and backing-off events of a version-4 table', async () => {
      const schema = `${db.schema}_up`;
      const names = postgresNames({ schema });
      try {
        await migratePostgres(db.connection, names, postgresMigrations().filter((m) => m.name < '005'));
        const t = `"${schema}".outbox`;
        const insert = (key: string, n: number) =>
          db.query(`INSERT INTO ${t} (id, type, aggregate_type, aggregate_id, key, destination, payload) SELECT gen_random_uuid(), 'T', 'A', $1, $1, 'd', '{}' FROM generate_series(1, $2)`, [key, n]);
        await insert('parked', 3);
        await insert('backoff', 3);
        await insert('free', 2);
        await db.query(`UPDATE ${t} SET state = 'parked', parked_at = now() WHERE seq = (SELECT min(seq) FROM ${t} WHERE key = 'parked')`);
        await db.query(`UPDATE ${t} SET attempts = 1, next_attempt_at = now() + interval '1 hour' WHERE seq = (SELECT min(seq) FROM ${t} WHERE key = 'backoff')`);
        assert.deepEqual(await migratePostgres(db.connection, names), postgresMigrations().filter((m) => m.name >= '005').map((m) => m.name));
        const rows = await db.query<{ key: string; held: number }>(`SELECT key, count(held_by)::int AS held FROM ${t} GROUP BY key ORDER BY key`);
        assert.deepEqual(rows, [
          { key: 'backoff', held: 2 },
          { key: 'free', held: 0 },
          { key: 'parked', held: 2 },
        ]);
        const store = new PostgresRelayStore({ schema, connection: db.connection, releaseHeldEveryMs: 3_600_000 });
        const leases = await store.lease(RELAY, [], 256, 600_000);
        assert.deepEqual((await store.claim(leases, ALL)).map((e) => e.key), ['free', 'free']);
      } finally {
        await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    });
  });
}
