/**
 * The WAL wake mode wakes by bucket, on the real PostgreSQL: the stream reads
 * each inserted row's seq and key, the bucket computed from the key is the
 * table's own (`hashtext(key) & 255`), a commit wakes only the waiters of its
 * rows' buckets, a bucket whose lane is busy claiming wakes no other lane, a
 * bucket the relay leases that no lane lists wakes every waiter (a lane waiting
 * since before it took that lease), a bucket another relay leases wakes no one,
 * and a database that is not UTF-8 falls back to waking everyone. The publication and slots are this file's own.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, payloadType, type BucketLease } from 'txbox';
import pg from 'pg';
import { dropPublication, migratePostgres, pgConnection, postgresNames, PostgresOutboxStore, PostgresRelayStore, type WalCommit } from 'txbox/postgres';
import { bucketOfKeyBytes } from '../../src/stores/postgres/postgres-bucket.ts';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;
const outbox = () => createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [E] });

before(async () => {
  db = await openDb('postgres');
});
after(async () => {
  await dropPublication(db.connection, postgresNames({ schema: db.schema })).catch(() => {});
  await db.close();
});

/** A WAL-mode store, streaming. */
async function streamingStore(walTrace?: (c: WalCommit) => void): Promise<{ store: PostgresRelayStore; stop: AbortController }> {
  let slowStart = false;
  const noop = (): void => {};
  const logger = { debug: noop, info: noop, error: noop, warn: () => (slowStart = true) };
  const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection, wake: 'wal', logger, ...(walTrace ? { walTrace } : {}) });
  const stop = new AbortController();
  await store.waitForEvents(1, stop.signal); // opens the stream
  await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000);
  // A slot that took over 5 s to create (a loaded server) made the store LISTEN meanwhile, and
  // LISTEN's catch-up wakes everyone once it connects: let that pass before measuring wake-ups.
  if (slowStart) await new Promise((r) => setTimeout(r, 3000));
  // The stream's start wakes everyone and asks for one quick second look (as after a commit): take it.
  await store.waitForEvents(1, stop.signal);
  return { store, stop };
}

/** Two aggregate ids whose keys (`A:<id>`) fall in different buckets, with those buckets. */
async function twoBuckets(): Promise<{ a: string; b: string; bucketA: number; bucketB: number }> {
  const rows = await db.query<{ id: string; bucket: number }>(`SELECT 'x' || i AS id, hashtext('A:x' || i) & 255 AS bucket FROM generate_series(1, 10) i`);
  const first = rows[0]!;
  const other = rows.find((r) => r.bucket !== first.bucket)!;
  return { a: first.id, b: other.id, bucketA: first.bucket, bucketB: other.bucket };
}

/** Resolves to true when `wait` settles within `ms`, false otherwise. */
async function settlesWithin(wait: Promise<void>, ms: number): Promise<boolean> {
  let settled = false;
  void wait.then(() => (settled = true));
  const deadline = Date.now() + ms;
  while (!settled && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  return settled;
}

it('reads each inserted row from the stream; the bucket computed from its key is the table\'s bucket column', async () => {
  const commits: WalCommit[] = [];
  const { store, stop } = await streamingStore((c) => commits.push(c));
  try {
    // ASCII, 2-, 3- and 4-byte UTF-8, empty and long ids (keys of every length mod 12).
    const ids = Array.from({ length: 120 }, (_, i) => ['', 'é', '€', '😀', 'k'][i % 5]!.repeat(i % 7) + 'z'.repeat(i % 13) + String(i));
    for (let t = 0; t < 6; t++) {
      await db.transaction((tx) => outbox().enqueue(tx, ids.slice(t * 20, t * 20 + 20).map((id, n) => E({ aggregateId: id, payload: { n } }))));
    }
    await waitFor('six commits streamed', () => commits.length >= 6);
    const rows = await db.query<{ seq: string; key: string; bucket: number }>(`SELECT o.seq::text AS seq, o.key, o.bucket FROM "${db.schema}".outbox o ORDER BY o.seq`);
    const streamed = commits.flatMap((c) => c.seqs.map((seq, i) => ({ seq, key: c.keys![i]! })));
    assert.equal(streamed.length, rows.length, 'every row of every commit');
    for (const [i, r] of rows.entries()) {
      assert.equal(streamed[i]!.seq, Number(r.seq));
      assert.equal(Buffer.from(streamed[i]!.key).toString('utf8'), r.key);
      assert.equal(bucketOfKeyBytes(streamed[i]!.key), r.bucket, `bucket of ${JSON.stringify(r.key)}`);
    }
    assert.ok(commits.every((c) => Math.abs(c.commitTimeMs - Date.now()) < 60_000), 'commit times are epoch ms');
  } finally {
    stop.abort();
    await store.close();
  }
});

it('a commit wakes only the waiters of its rows\' buckets, and counts only for them', async () => {
  const { a, b, bucketA, bucketB } = await twoBuckets();
  const { store, stop } = await streamingStore();
  try {
    const seenA = store.wakeups([bucketA]);
    const seenB = store.wakeups([bucketB]);
    const waitA = store.waitForEvents(60_000, stop.signal, seenA, [bucketA]);
    const waitB = store.waitForEvents(60_000, stop.signal, seenB, [bucketB]);
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: a, payload: { n: 1 } })));
    assert.ok(await settlesWithin(waitA, 15_000), 'the waiter of the bucket is woken');
    assert.equal(await settlesWithin(waitB, 300), false, 'the waiter of another bucket sleeps on');
    assert.equal(store.wakeups([bucketA]), seenA + 1);
    assert.equal(store.wakeups([bucketB]), seenB, 'a claim of bucket B would not skip its wait for it');
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: b, payload: { n: 2 } })));
    assert.ok(await settlesWithin(waitB, 15_000), 'then its own commit wakes it');
  } finally {
    stop.abort();
    await store.close();
  }
});

it('a bucket the relay leases that no waiter lists wakes every waiter; a bucket it does not lease wakes none', async () => {
  const { a, b, bucketA, bucketB } = await twoBuckets();
  await db.query(`UPDATE "${db.schema}".outbox_buckets SET owner = NULL, lease_until = NULL`);
  const { store, stop } = await streamingStore();
  const relayId = 'wallat-buckets';
  let leases: BucketLease[] = [];
  try {
    await store.heartbeat({ relayId, host: 'test', pid: process.pid, inFlight: 0, publishedTotal: 0, ratePerMinute: 0 }, 30_000);
    leases = await store.lease(relayId, [], 256, 30_000);
    assert.equal(leases.length, 256);
    // A lane that waits on bucket A only (its leases before it took B): B's commit must still reach it.
    let wait = store.waitForEvents(60_000, stop.signal, store.wakeups([bucketA]), [bucketA]);
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: b, payload: { n: 1 } })));
    assert.ok(await settlesWithin(wait, 15_000), 'a leased bucket no waiter lists wakes everyone');
    // Bucket B released (another relay takes it): its commits are that relay's to claim.
    await store.release(relayId, leases.filter((l) => l.bucket === bucketB));
    const before = store.wakeups();
    wait = store.waitForEvents(60_000, stop.signal, store.wakeups([bucketA]), [bucketA]);
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: b, payload: { n: 2 } })));
    await waitFor('the commit streamed', () => store.wakeups() > before);
    assert.equal(await settlesWithin(wait, 300), false, 'a bucket leased elsewhere wakes no one here');
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: a, payload: { n: 3 } })));
    assert.ok(await settlesWithin(wait, 15_000));
  } finally {
    stop.abort();
    await store.leave(relayId, leases).catch(() => {});
    await store.close();
  }
});

it('a commit in a bucket whose lane is busy (listed, not waiting) wakes no other lane', async () => {
  const { a, b, bucketA, bucketB } = await twoBuckets();
  await db.query(`UPDATE "${db.schema}".outbox_buckets SET owner = NULL, lease_until = NULL`);
  const { store, stop } = await streamingStore();
  const relayId = 'wallat-busy';
  let leases: BucketLease[] = [];
  try {
    await store.heartbeat({ relayId, host: 'test', pid: process.pid, inFlight: 0, publishedTotal: 0, ratePerMinute: 0 }, 30_000);
    leases = await store.lease(relayId, [], 256, 30_000);
    assert.equal(leases.length, 256);
    // Lane B reads its count before its claim (as the relay does), and is busy: not waiting.
    const seenB = store.wakeups([bucketB]);
    const waitA = store.waitForEvents(60_000, stop.signal, store.wakeups([bucketA]), [bucketA]);
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: b, payload: { n: 1 } })));
    await waitFor('lane B counts the commit', () => store.wakeups([bucketB]) === seenB + 1);
    assert.equal(await settlesWithin(waitA, 300), false, 'lane A sleeps on: the commit is lane B\'s');
    await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: a, payload: { n: 2 } })));
    assert.ok(await settlesWithin(waitA, 15_000));
  } finally {
    stop.abort();
    await store.leave(relayId, leases).catch(() => {});
    await store.close();
  }
});

it('a database that is not UTF-8: says so at info, and every commit wakes every waiter (as before)', async () => {
  // Its own LATIN1 database: the stream's key bytes are LATIN1 there, which the JavaScript hash would misplace.
  const name = `txbox_wallat_latin1_${process.pid}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${name}`;
  const connection = pgConnection({ connectionString: url.toString(), maxConnections: 3 });
  const names = postgresNames({ schema: 'wallat' });
  const infos: string[] = [];
  const noop = (): void => {};
  const store = new PostgresRelayStore({ schema: 'wallat', connection, wake: 'wal', logger: { debug: noop, warn: (o, msg) => infos.push(`${msg ?? ''} ${JSON.stringify(o)}`), error: noop, info: (_o, msg) => infos.push(msg ?? '') } });
  const stop = new AbortController();
  try {
    await migratePostgres(connection, names);
    const [{ bucket: bucketA }] = (await connection.query<{ bucket: number }>(`SELECT hashtext('A:é1') & 255 AS bucket`)).rows as [{ bucket: number }];
    const [{ id: other }] = (await connection.query<{ id: string }>(`SELECT 'é' || i AS id FROM generate_series(2, 50) i WHERE hashtext('A:é' || i) & 255 <> $1 LIMIT 1`, [bucketA])).rows as [{ id: string }];
    await store.waitForEvents(1, stop.signal);
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000).catch((err: Error) => {
      throw new Error(`${err.message}; logged: ${infos.join(' | ')}`);
    });
    await new Promise((r) => setTimeout(r, 300));
    await store.waitForEvents(1, stop.signal);
    assert.ok(infos.some((m) => /cannot compute buckets/.test(m)), infos.join('\n'));
    const wait = store.waitForEvents(60_000, stop.signal, store.wakeups([bucketA]), [bucketA]);
    const latin = createOutbox({ store: new PostgresOutboxStore({ schema: 'wallat', notify: false }), events: [E] });
    await connection.transaction((tx) => latin.enqueue(tx, E({ aggregateId: other, payload: { n: 1 } })));
    assert.ok(await settlesWithin(wait, 15_000), 'a commit in another bucket wakes it: buckets are not trusted here');
  } finally {
    stop.abort();
    await store.close();
    await dropPublication(connection, names).catch(() => {});
    await connection.close();
    // The temporary slot goes when its walsender's session has ended.
    await waitFor('the slot gone', async () => (await admin.query(`SELECT 1 FROM pg_replication_slots WHERE database = $1`, [name])).rows.length === 0, 30_000).catch(() => {});
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
});
