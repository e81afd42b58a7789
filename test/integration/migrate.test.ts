import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { inboxNames, migrateInbox, migratePostgres, pgConnection, postgresMigrations, postgresNames } from 'txbox/postgres';
import { DATABASE_URL, uniqueSchema } from '../helpers/databases.ts';
import { renderMigration, splitStatements } from '../../src/stores/postgres/postgres-migrations.ts';
import { runCli } from '../helpers/cli.ts';

let pool: pg.Pool;
const schema = uniqueSchema('mig');

before(() => {
  pool = new pg.Pool({ connectionString: DATABASE_URL });
});
after(async () => {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
});

it('three `txbox migrate` processes at once apply each migration exactly once', async () => {
  const env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: schema };
  const results = await Promise.all([runCli(['migrate'], env), runCli(['migrate'], env), runCli(['migrate'], env)]);
  for (const r of results) assert.equal(r.code, 0, r.stderr);
  const applied = results.filter((r) => /applied/.test(r.stdout));
  assert.equal(applied.length, 1, results.map((r) => r.stdout).join(' | '));
  assert.equal(results.filter((r) => /up to date/.test(r.stdout)).length, 2);
  const { rows } = await pool.query(`SELECT name FROM "${schema}".outbox_migrations ORDER BY name`);
  assert.deepEqual(rows.map((r: { name: string }) => r.name), postgresMigrations().map((m) => m.name));
  const again = await runCli(['migrate'], env);
  assert.match(again.stdout, /up to date/);
});

it('`txbox migrate --print` emits SQL that applies cleanly with psql-style execution', async () => {
  const printSchema = uniqueSchema('print');
  const r = await runCli(['migrate', '--print', '--schema', printSchema]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`CREATE TABLE IF NOT EXISTS "${printSchema}"."outbox"`));
  try {
    await pool.query(r.stdout); // simple-query protocol runs the whole script
    await pool.query(r.stdout); // and it is idempotent
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${printSchema}".outbox_buckets`);
    assert.equal(rows[0].n, 256);
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS "${printSchema}" CASCADE`);
  }
});

it('migration 004 turns a version-3 jsonb payload column into json and keeps pending events publishable', async () => {
  const upSchema = uniqueSchema('up');
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 2 });
  const names = postgresNames({ schema: upSchema });
  try {
    const all = postgresMigrations();
    assert.ok(all.some((m) => m.name === '004_payload_json.sql'));
    await migratePostgres(connection, names, all.filter((m) => m.name < '004'));
    const type = async () =>
      (await pool.query(`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox' AND column_name = 'payload'`, [upSchema])).rows[0].data_type;
    assert.equal(await type(), 'jsonb');
    await pool.query(
      `INSERT INTO "${upSchema}".outbox (id, type, aggregate_type, aggregate_id, key, destination, payload) VALUES (gen_random_uuid(), 'T', 'A', '1', 'A:1', 'd', '{"b":1,"a":2}')`,
    );
    assert.deepEqual(await migratePostgres(connection, names, all.filter((m) => m.name < '005')), ['004_payload_json.sql']);
    assert.equal(await type(), 'json');
    // jsonb's text form (its key order and spacing) is what the column now holds: the same JSON value.
    const { rows } = await pool.query(`SELECT payload::text AS t, state FROM "${upSchema}".outbox`);
    assert.deepEqual(rows, [{ t: '{"a": 2, "b": 1}', state: 'pending' }]);
    // The later migrations apply on top, once.
    await migratePostgres(connection, names);
    assert.deepEqual(await migratePostgres(connection, names), []);
  } finally {
    await connection.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${upSchema}" CASCADE`);
  }
});

it('migration 006 adds the relays\' circuits column to an existing table; a heartbeat fills it; applying it again changes nothing', async () => {
  const upSchema = uniqueSchema('up6');
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 2 });
  const names = postgresNames({ schema: upSchema });
  try {
    const all = postgresMigrations();
    const m006 = all.find((m) => m.name.startsWith('006_'))!;
    await migratePostgres(connection, names, all.filter((m) => m.name < '006'));
    await pool.query(`INSERT INTO "${upSchema}".outbox_relays (relay_id, host, pid) VALUES ('old-relay', 'h', 1)`);
    assert.ok((await migratePostgres(connection, names)).includes(m006.name));
    const { rows } = await pool.query(`SELECT circuits FROM "${upSchema}".outbox_relays`);
    assert.deepEqual(rows, [{ circuits: [] }]);
    for (const sql of splitStatements(renderMigration(m006.sql, names))) await pool.query(sql); // idempotent
  } finally {
    await connection.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${upSchema}" CASCADE`);
  }
});

it('migration 009: the claim by seq keeps its generic plan (force_generic_plan with index lookups only); an outbox at version 8 is brought to it', async () => {
  const upSchema = uniqueSchema('up');
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 2 });
  const names = postgresNames({ schema: upSchema });
  const config = async (): Promise<string[]> =>
    (
      await pool.query<{ proconfig: string[] }>(
        `SELECT p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'outbox_claim_seqs'`,
        [upSchema],
      )
    ).rows[0]!.proconfig;
  try {
    const all = postgresMigrations();
    await migratePostgres(connection, names, all.filter((m) => m.name < '009'));
    // Version 8 planned the query on every call (PL/pgSQL's plan cache chose custom plans).
    assert.ok(!(await config()).includes('plan_cache_mode=force_generic_plan'));
    assert.deepEqual(await migratePostgres(connection, names), ['009_claim_seqs_generic_plan.sql']);
    assert.deepEqual((await config()).sort(), ['enable_bitmapscan=off', 'enable_seqscan=off', 'plan_cache_mode=force_generic_plan']);
    // The same rows as before: a pending row by seq, and nothing for a published one.
    await pool.query(
      `INSERT INTO "${upSchema}".outbox (id, type, aggregate_type, aggregate_id, key, destination, payload) VALUES (gen_random_uuid(), 'T', 'A', '1', 'A:1', 'd', '{}'), (gen_random_uuid(), 'T', 'A', '2', 'A:2', 'd', '{}')`,
    );
    await pool.query(`UPDATE "${upSchema}".outbox SET state = 'published' WHERE seq = 2`);
    const claimed = async () =>
      (await pool.query<{ seq: string }>(`SELECT seq FROM "${upSchema}".outbox_claim_seqs('{1,2}'::bigint[], (SELECT array_agg(b)::smallint[] FROM generate_series(0, 255) b), 10, '{}'::text[])`)).rows.map((r) => Number(r.seq));
    assert.deepEqual(await claimed(), [1]);
  } finally {
    await connection.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${upSchema}" CASCADE`);
  }
});

it('the longest table name the stores accept migrates as an outbox and as an inbox, and one character more is refused when the store is made', async () => {
  const longSchema = uniqueSchema('long');
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 2 });
  // Every name migrations derive (`<table>_blocking_key_idx`, the longest suffix) must fit PostgreSQL's 63 bytes.
  let longest = '';
  for (let n = 63; n > 0; n--) {
    try {
      postgresNames({ schema: longSchema, table: 't'.repeat(n) });
      longest = 't'.repeat(n);
      break;
    } catch {
      // too long: try one shorter
    }
  }
  try {
    await migratePostgres(connection, postgresNames({ schema: longSchema, table: longest }));
    await migrateInbox(connection, inboxNames({ schema: longSchema, table: longest.replace(/^t/, 'i') }));
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1`, [longSchema]);
    assert.ok(rows[0]!.n > 4, `${rows[0]!.n} relations`);
    assert.throws(() => postgresNames({ table: `${longest}t` }), /at most \d+ characters/);
  } finally {
    await connection.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${longSchema}" CASCADE`);
  }
});
