/**
 * What the WAL stream reads, on the real PostgreSQL.
 *
 * A transaction that inserts many outbox rows at once (a backfill, an
 * `INSERT ... SELECT`): the stream used to keep every row's key and seq until
 * the Commit arrived: one transaction of 1,000,000 rows took the stream's
 * process from 86-92 to 348-372 MB (bench/wal-large-commit.ts), and nothing bounded it. Past
 * `maxRowsPerCommit` rows a commit is announced as "rows in buckets not known"
 * (every lane wakes and runs its ordinary claim, the right claim for a
 * backlog), and the stream stops keeping that transaction's rows.
 *
 * A publication that covers more than the outbox, or a publication of the
 * outbox's name that does not cover it: rows of other tables used to be read
 * as the outbox's, and a publication for another table was streamed as if it
 * were the outbox's (the relay heard nothing, silently).
 *
 * Guards (they passed when written): the key and seq are still read after the
 * table's columns change under a running stream (a migration while relays
 * stream), and a commit announces none of the rows of a savepoint rolled back
 * or of a transaction rolled back.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { dropPublication, ensurePublication, postgresNames, PostgresOutboxStore, PostgresRelayStore, walNames } from 'txbox/postgres';
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

/** A stream of `publication` on slot `slot` whose commits land in the returned list. */
async function recordCommits(slot: string, publication: string, more: Partial<Parameters<typeof openWalStream>[0]> = {}): Promise<{ commits: WalCommit[]; stream: Awaited<ReturnType<typeof openWalStream>> }> {
  const commits: WalCommit[] = [];
  const stream = await openWalStream({
    client: { connectionString: DATABASE_URL },
    slot,
    publication,
    onCommit: (c) => commits.push(c),
    onEnd: () => {},
    ...more,
  });
  return { commits, stream };
}

/** A commit's keys as text (null: not read). */
const keysOf = (c: WalCommit): string[] | null => c.keys?.map((k) => Buffer.from(k).toString('utf8')) ?? null;

it('the stream keeps at most maxRowsPerCommit rows of a transaction: a larger one is announced with keys null', async () => {
  const { commits, stream } = await recordCommits(`${table}_s`, table, { maxRowsPerCommit: 100 });
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

it('the stream reads only the outbox table: rows another table of the same publication inserts wake nothing', async () => {
  // A publication may cover more than the outbox (an operator added a table, or two outboxes whose
  // names collide share one): their rows have no place in this outbox's buckets.
  const other = `${table}_other`;
  await client.query(`CREATE TABLE ${other} (seq bigserial PRIMARY KEY, key text NOT NULL)`);
  await client.query(`ALTER PUBLICATION ${table} ADD TABLE ${other}`);
  const { commits, stream } = await recordCommits(`${table}_f`, table, { table: { schema: 'public', name: table } });
  try {
    await client.query(`INSERT INTO ${other} (key) VALUES ('a'), ('b')`);
    await client.query(`BEGIN; INSERT INTO ${other} (key) VALUES ('c'); INSERT INTO ${table} (key) VALUES ('mine'); COMMIT`);
    await waitFor('the commit with a row of the outbox', () => commits.length >= 1, 10_000);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(commits.length, 1, 'the commit of the other table alone announces nothing');
    assert.deepEqual(commits[0]!.keys?.map((k) => Buffer.from(k).toString()), ['mine']);
    assert.equal(commits[0]!.seqs.length, 1);
  } finally {
    await stream.close();
    await client.query(`ALTER PUBLICATION ${table} DROP TABLE ${other}`);
    await client.query(`DROP TABLE ${other}`);
  }
});

it('ensurePublication refuses a publication of the outbox name that does not publish the outbox inserts, naming the fix', async () => {
  const names = postgresNames({ schema: db.schema });
  const { publication } = walNames(names);
  await dropPublication(db.connection, names);
  // Another table's publication under this outbox's name (two names that collide, or a publication made by hand).
  await client.query(`CREATE PUBLICATION "${publication}" FOR TABLE ${table}`);
  try {
    await assert.rejects(ensurePublication(db.connection, names), (err: Error) => {
      assert.match(err.message, new RegExp(`publication ${publication} .*does not publish inserts into "${db.schema}"."outbox".*ALTER PUBLICATION "${publication}" ADD TABLE "${db.schema}"."outbox"`));
      return true;
    });
    await client.query(`ALTER PUBLICATION "${publication}" ADD TABLE "${db.schema}".outbox`);
    assert.equal(await ensurePublication(db.connection, names), false, 'covers the outbox now: nothing to create');
    await client.query(`ALTER PUBLICATION "${publication}" SET (publish = 'update')`);
    await assert.rejects(ensurePublication(db.connection, names), /does not publish inserts/);
  } finally {
    await dropPublication(db.connection, names);
  }
  assert.equal(await ensurePublication(db.connection, names), true);
});

it('the stream reads the key and seq after the table changes under it (a column dropped before them, one added)', async () => {
  // A migration run while relays stream (txbox's own add columns): pgoutput sends a new Relation
  // message before the first row in the new shape, and dropped columns leave the row's column list.
  const shaped = `${table}_shape`;
  await client.query(`CREATE TABLE ${shaped} (a text, seq bigserial PRIMARY KEY, b text, key text NOT NULL)`);
  await client.query(`CREATE PUBLICATION ${shaped} FOR TABLE ${shaped} WITH (publish = 'insert')`);
  const { commits, stream } = await recordCommits(`${shaped}_s`, shaped);
  try {
    await client.query(`INSERT INTO ${shaped} (a, b, key) VALUES ('x', 'y', 'k1')`);
    await client.query(`ALTER TABLE ${shaped} DROP COLUMN a`);
    await client.query(`INSERT INTO ${shaped} (b, key) VALUES ('y', 'k2')`);
    await client.query(`ALTER TABLE ${shaped} ADD COLUMN c jsonb NOT NULL DEFAULT '{}'`);
    await client.query(`INSERT INTO ${shaped} (b, key, c) VALUES ('y', 'k3', '{"z": 1}')`);
    await client.query(`ALTER TABLE ${shaped} DROP COLUMN b`);
    await client.query(`INSERT INTO ${shaped} (key) VALUES ('k4'), ('k5')`);
    await waitFor('four commits', () => commits.length >= 4, 10_000);
    assert.deepEqual(commits.map(keysOf), [['k1'], ['k2'], ['k3'], ['k4', 'k5']]);
    assert.deepEqual(commits.map((c) => c.seqs), [[1], [2], [3], [4, 5]]);
  } finally {
    await stream.close();
    await client.query(`DROP PUBLICATION IF EXISTS ${shaped}`).catch(() => {});
    await client.query(`DROP TABLE IF EXISTS ${shaped}`).catch(() => {});
  }
});

it('a commit announces only the rows that survived it: none of a savepoint rolled back, none of a rolled-back transaction', async () => {
  const { commits, stream } = await recordCommits(`${table}_sp`, table);
  try {
    await client.query('BEGIN');
    await client.query(`INSERT INTO ${table} (key) VALUES ('kept1')`);
    await client.query('SAVEPOINT s');
    await client.query(`INSERT INTO ${table} (key) VALUES ('gone')`);
    await client.query('ROLLBACK TO SAVEPOINT s');
    await client.query(`INSERT INTO ${table} (key) VALUES ('kept2')`);
    await client.query('COMMIT');
    await client.query('BEGIN');
    await client.query(`INSERT INTO ${table} (key) VALUES ('never')`);
    await client.query('ROLLBACK');
    await client.query(`INSERT INTO ${table} (key) VALUES ('after')`);
    await waitFor('two commits', () => commits.length >= 2, 10_000);
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(commits.map(keysOf), [['kept1', 'kept2'], ['after']]);
    // Sequences are not transactional: the rolled-back rows used up the seqs between.
    const [a, b] = commits[0]!.seqs;
    assert.deepEqual(commits.map((c) => c.seqs), [[a, a! + 2], [a! + 4]]);
    assert.equal(b, a! + 2);
  } finally {
    await stream.close();
  }
});
