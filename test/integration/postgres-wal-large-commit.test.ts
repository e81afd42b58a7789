/**
 * A transaction that inserts many outbox rows at once (a backfill, an
 * `INSERT ... SELECT`) in the WAL wake mode, on the real PostgreSQL. The
 * stream used to keep every row's key and seq until the Commit arrived: one
 * transaction of 1,000,000 rows took the stream's process from 81 to 350 MB
 * (scratch measurement, 29 Nov 2026), and nothing bounded it. Past
 * `maxRowsPerCommit` rows a commit is announced as "rows in buckets not known"
 * (every lane wakes and runs its ordinary claim, the right claim for a
 * backlog), and the stream stops keeping that transaction's rows.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { dropPublication, postgresNames, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { checkDeliveries, RecordingTransport } from 'txbox/testing';
import { MAX_ROWS_PER_COMMIT, openWalStream, type WalCommit } from '../../src/stores/postgres/pg-wal-stream.ts';
import { DATABASE_URL, openDb, uniqueSchema, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;
let client: pg.Client;
const table = uniqueSchema('txbox_walbig');

before(async () => {
  db = await openDb('postgres');
  client = new pg.Client(DATABASE_URL);
  await client.connect();
  await client.query(`CREATE TABLE ${table} (seq bigserial PRIMARY KEY, key text NOT NULL, payload text)`);
  await client.query(`CREATE PUBLICATION ${table} FOR TABLE ${table} WITH (publish = 'insert')`);
});
after(async () => {
  await client.query(`DROP PUBLICATION IF EXISTS ${table}`).catch(() => {});
  await client.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
  await client.end();
  await dropPublication(db.connection, postgresNames({ schema: db.schema })).catch(() => {});
  await db.close();
});

it('the stream keeps at most maxRowsPerCommit rows of a transaction: a larger one is announced with keys null', async () => {
  const commits: WalCommit[] = [];
  const stream = await openWalStream({
    client: { connectionString: DATABASE_URL },
    slot: `${table}_s`,
    publication: table,
    maxRowsPerCommit: 100,
    onCommit: (c) => commits.push(c),
    onEnd: () => {},
  });
  try {
    const insert = (n: number) => client.query(`INSERT INTO ${table} (key, payload) SELECT 'k' || (g % 7), 'x' FROM generate_series(1, ${n}) g`);
    await insert(100);
    await insert(250);
    await insert(3);
    await waitFor('three commits', () => commits.length >= 3, 10_000);
    assert.equal(commits[0]!.keys?.length, 100, 'at the limit: every key');
    assert.equal(commits[0]!.seqs.length, 100);
    assert.equal(commits[1]!.keys, null, 'past the limit: no keys (every lane wakes)');
    assert.equal(commits[1]!.seqs.length, 0, 'past the limit: no seqs kept');
    assert.equal(commits[2]!.keys?.length, 3, 'the next transaction is read row by row again');
    assert.deepEqual(commits[2]!.seqs, [351, 352, 353]);
  } finally {
    await stream.close();
  }
});

it(`a relay woken by the WAL alone publishes a transaction of more than ${MAX_ROWS_PER_COMMIT} rows, and the commits after it, in per-key order`, async () => {
  const transport = new RecordingTransport();
  const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection, wake: 'wal' });
  // Polling every 10 minutes: only the stream can wake the relay.
  const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 5000 });
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [E] });
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000);
    await waitFor('buckets held', () => relay.heldBuckets > 0, 30_000);
    const committed = new Map<string, string[]>();
    const enqueue = async (count: number, round: number): Promise<void> => {
      const events = Array.from({ length: count }, (_, i) => E({ aggregateId: `k${i % 50}`, payload: { n: round } }));
      const ids = await db.transaction((tx) => outbox.enqueue(tx, events));
      ids.forEach((id, i) => committed.set(`A:k${i % 50}`, [...(committed.get(`A:k${i % 50}`) ?? []), id]));
    };
    const large = MAX_ROWS_PER_COMMIT + 200;
    await enqueue(large, 0);
    await enqueue(20, 1);
    await waitFor('all delivered', () => new Set(transport.acked.map((e) => e.id)).size >= large + 20, 30_000);
    const report = checkDeliveries(committed, transport.acked);
    assert.equal(report.lost, 0);
    assert.equal(report.orderViolations, 0);
    assert.equal(report.phantom, 0);
    assert.ok(store.claimStats().ordinary > 0, 'the large commit was claimed by the ordinary claim');
  } finally {
    await relay.stop();
  }
});
