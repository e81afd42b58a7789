import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { inboxNames, migrateInbox, migratePostgres, pgConnection, PostgresRelayStore, postgresMigrations, postgresNames } from 'txbox/postgres';
import type { Logger } from 'txbox';
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

/** A logger that keeps the relay store's warnings. */
function warningLogger(): { logger: Logger; warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, logger: { debug() {}, info() {}, error() {}, warn: (_o: object, msg: string) => void warnings.push(msg) } };
}

/** `n` pending events of keys A:1..A:n in the outbox of `schema`. */
function insertEvents(schema: string, n: number): Promise<unknown> {
  return pool.query(
    `INSERT INTO "${schema}".outbox (id, type, aggregate_type, aggregate_id, key, destination, payload)
     SELECT gen_random_uuid(), 'T', 'A', i::text, 'A:' || i, 'd', '{}' FROM generate_series(1, $1) i`,
    [n],
  );
}

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
    assert.deepEqual(await migratePostgres(connection, names, all.filter((m) => m.name < '010')), ['009_claim_seqs_generic_plan.sql']);
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

it('migration 010: small batches are marked through the function, with the same results as the statement; an outbox at version 9 is marked by the statement with a warning until migrated', async () => {
  const upSchema = uniqueSchema('up10');
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 3 });
  const names = postgresNames({ schema: upSchema });
  const { logger, warnings } = warningLogger();
  const store = new PostgresRelayStore({ schema: upSchema, connection, logger });
  const states = async (): Promise<string[]> => (await pool.query<{ state: string }>(`SELECT state FROM "${upSchema}".outbox ORDER BY seq`)).rows.map((r) => r.state);
  try {
    await migratePostgres(connection, names, postgresMigrations().filter((m) => m.name < '010'));
    await insertEvents(upSchema, 3);
    const leases = await store.lease('r', [], 256, 60_000);
    const tokenOf = new Map(leases.map((l) => [l.bucket, l.token]));
    const options = { limit: 10, skipParkedDestinations: [] };
    let events = await store.claim(leases, options);
    assert.equal(events.length, 3);
    // Version 9: no function; the statement marks, once warned.
    const completions = (outcome: 'published' | 'retry') =>
      events.map((e) => (outcome === 'published' ? { seq: e.seq, token: tokenOf.get(e.bucket)!, outcome } : { seq: e.seq, token: tokenOf.get(e.bucket)!, outcome, delayMs: 0, error: 'x' }));
    assert.deepEqual(await store.complete('r', completions('retry')), { applied: 3, rejected: 0 });
    assert.equal(warnings.filter((w) => /migration 010/.test(w)).length, 1);
    assert.deepEqual(await migratePostgres(connection, names), ['010_complete_small_batches.sql']);
    const config = (
      await pool.query<{ proconfig: string[] }>(
        `SELECT p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'outbox_complete'`,
        [upSchema],
      )
    ).rows[0]!.proconfig;
    assert.deepEqual([...config].sort(), ['enable_bitmapscan=off', 'enable_seqscan=off', 'plan_cache_mode=force_generic_plan']);
    // A new store uses the function: a mark by a stale token is fenced, the right one applies.
    const fresh = new PostgresRelayStore({ schema: upSchema, connection, logger });
    try {
      events = await fresh.claim(leases, options);
      assert.equal(events.length, 3);
      const stale = events.map((e) => ({ seq: e.seq, token: String(BigInt(tokenOf.get(e.bucket)!) + 1n), outcome: 'published' as const }));
      assert.deepEqual(await fresh.complete('r', stale), { applied: 0, rejected: 3 });
      assert.deepEqual(await fresh.complete('r', completions('published')), { applied: 3, rejected: 0 });
      assert.deepEqual(await states(), ['published', 'published', 'published']);
      assert.equal(warnings.filter((w) => /migration 010/.test(w)).length, 1, 'no warning once migrated');
      // The function's own rows and result: a direct call as the store makes it.
      await insertEvents(upSchema, 1);
      const [e] = await fresh.claim(leases, options);
      const { rows } = await pool.query(
        `SELECT o_applied, o_released FROM "${upSchema}".outbox_complete('r', ARRAY[$1]::bigint[], ARRAY[$2]::bigint[], '{0}', '{0}', '{NULL}', '{""}', false, true)`,
        [e!.seq, tokenOf.get(e!.bucket)],
      );
      assert.deepEqual(rows, [{ o_applied: 1, o_released: 0 }]);
    } finally {
      await fresh.close();
    }
  } finally {
    await store.close();
    await connection.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${upSchema}" CASCADE`);
  }
});

it('migration 010: a relay whose role may not execute the mark function warns once and marks with the statement', async () => {
  const roleSchema = uniqueSchema('role10');
  const role = `txbox_norole_${roleSchema.slice(-8)}`;
  const admin = pgConnection({ connectionString: DATABASE_URL, maxConnections: 2 });
  const url = new URL(DATABASE_URL);
  url.username = role;
  url.password = '';
  const connection = pgConnection({ connectionString: url.toString(), maxConnections: 2 });
  const { logger, warnings } = warningLogger();
  try {
    await migratePostgres(admin, postgresNames({ schema: roleSchema }));
    await pool.query(`CREATE ROLE ${role} LOGIN`);
    await pool.query(`GRANT USAGE ON SCHEMA "${roleSchema}" TO ${role}`);
    await pool.query(`GRANT SELECT, UPDATE, DELETE ON "${roleSchema}".outbox TO ${role}`);
    await pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON "${roleSchema}".outbox_buckets, "${roleSchema}".outbox_relays TO ${role}`);
    await pool.query(`GRANT USAGE ON SEQUENCE "${roleSchema}".outbox_fence_seq TO ${role}`);
    await pool.query(`REVOKE EXECUTE ON FUNCTION "${roleSchema}".outbox_complete FROM PUBLIC`);
    await insertEvents(roleSchema, 2);
    const store = new PostgresRelayStore({ schema: roleSchema, connection, logger });
    try {
      const leases = await store.lease('r', [], 256, 60_000);
      const tokenOf = new Map(leases.map((l) => [l.bucket, l.token]));
      for (let round = 0; round < 2; round++) {
        const events = await store.claim(leases, { limit: 1, skipParkedDestinations: [] });
        assert.equal(events.length, 1);
        assert.deepEqual(await store.complete('r', events.map((e) => ({ seq: e.seq, token: tokenOf.get(e.bucket)!, outcome: 'published' as const }))), { applied: 1, rejected: 0 });
      }
      assert.deepEqual(warnings.filter((w) => /may not execute the mark function/.test(w)).length, 1);
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${roleSchema}".outbox WHERE state = 'published'`);
      assert.equal(rows[0]!.n, 2);
    } finally {
      await store.close();
    }
  } finally {
    await connection.close();
    await admin.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${roleSchema}" CASCADE`);
    await pool.query(`DROP ROLE IF EXISTS ${role}`);
  }
});
