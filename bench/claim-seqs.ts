/**
 * What one claim costs, statement by statement, on an idle database: the WAL
 * mode's claim by seq (`<table>_claim_seqs`, a PL/pgSQL function: migration
 * 009 plans it once per session), the same function as migration 008 made it
 * (planned again on every call: PL/pgSQL's plan cache chose custom plans), the
 * ordinary claim (`<table>_claim`, planned per call on purpose: migration
 * 003), the function's query sent as a prepared statement of its own on a
 * connection whose session forces generic plans (`plan_cache_mode`, with
 * sequential and bitmap scans off, as the function sets them: what the claim
 * would cost without PL/pgSQL), a bare primary-key SELECT of the same columns,
 * and `SELECT 1` (the round trip). One connection, BENCH_CLAIMS calls each, BENCH_ROUNDS rounds;
 * the outbox holds BENCH_ROWS rows, the last 100 pending.
 *
 *   node --conditions=txbox-source --import tsx bench/claim-seqs.ts
 */
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { DATABASE_URL, envInt, log, percentile, printTable, summary, withBench } from './lib.ts';

const CLAIMS = envInt('BENCH_CLAIMS', 2000);
const ROUNDS = envInt('BENCH_ROUNDS', 2);
const ROWS = envInt('BENCH_ROWS', 2000);

await withBench('claimseqs', async (bench) => {
  const s = `"${bench.schema}"`;
  await bench.sql(
    `INSERT INTO ${s}.outbox (id, type, aggregate_type, aggregate_id, key, destination, payload, headers, occurred_at)
     SELECT gen_random_uuid(), 'T', 'A', i::text, 'A:' || i, 'd', '{"a":1}', '{}', now() FROM generate_series(1, $1::int) i`,
    [ROWS],
  );
  await bench.sql(`UPDATE ${s}.outbox SET state = 'published' WHERE seq <= $1`, [ROWS - 100]);
  await bench.sql(`ANALYZE ${s}.outbox`);
  // Migration 008's function as it was: the same query, without plan_cache_mode.
  const v8 = readFileSync(new URL('../sql/postgres/008_claim_seqs.sql', import.meta.url), 'utf8');
  const fn = v8.slice(v8.indexOf('CREATE OR REPLACE FUNCTION'))
    .replaceAll('{{schema}}', s)
    .replaceAll('{{table:_claim_seqs}}', '"outbox_claim_seqs_v8"')
    .replaceAll('{{table}}', '"outbox"');
  await bench.sql(fn);
  const c = new pg.Client({ connectionString: DATABASE_URL });
  await c.connect();
  const generic = new pg.Client({ connectionString: DATABASE_URL });
  await generic.connect();
  await generic.query('SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET enable_bitmapscan = off');
  const v9 = readFileSync(new URL('../sql/postgres/009_claim_seqs_generic_plan.sql', import.meta.url), 'utf8');
  const bare = v9
    .slice(v9.indexOf('RETURN QUERY') + 'RETURN QUERY'.length, v9.indexOf('LIMIT p_limit;') + 'LIMIT p_limit'.length)
    .replaceAll('{{schema}}', s)
    .replaceAll('{{table}}', '"outbox"')
    .replace('SELECT o.*', `SELECT ${'$COLS'}`)
    .replaceAll('p_seqs', '$1::bigint[]')
    .replaceAll('p_buckets', '$2::smallint[]')
    .replaceAll('p_limit', '$3::integer')
    .replaceAll('p_skip', '$4::text[]');
  const buckets = Array.from({ length: 128 }, (_, i) => i * 2);
  const cols = `o.seq, o.id, o.type, o.aggregate_type, o.aggregate_id, o.key, o.bucket, o.destination, o.payload::text AS payload, o.headers, o.occurred_at, o.version, o.attempts, o.routes_done`;
  const pendingSeq = (i: number): number => ROWS - 100 + 1 + (i % 100);
  const statements: [string, string, (i: number) => unknown[]][] = [
    ['claim by seq (migration 009)', `SELECT ${cols} FROM ${s}.outbox_claim_seqs($1::bigint[], $2::smallint[], $3::integer, $4::text[]) o`, (i) => [[pendingSeq(i)], buckets, 500, []]],
    ['claim by seq as migration 008 made it', `SELECT ${cols} FROM ${s}.outbox_claim_seqs_v8($1::bigint[], $2::smallint[], $3::integer, $4::text[]) o`, (i) => [[pendingSeq(i)], buckets, 500, []]],
    ['its query, prepared, generic plan forced by the session', bare.replace('$COLS', cols), (i) => [[pendingSeq(i)], buckets, 500, []]],
    ['ordinary claim', `SELECT ${cols} FROM ${s}.outbox_claim($1::smallint[], $2::integer, $3::text[]) o`, () => [buckets, 500, []]],
    ['bare primary-key SELECT', `SELECT ${cols} FROM ${s}.outbox o WHERE seq = $1`, (i) => [pendingSeq(i)]],
    ['SELECT 1', 'SELECT 1', () => []],
  ];
  const rows: string[][] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      for (const [label, text, values] of statements) {
        const ms: number[] = [];
        for (let i = 0; i < CLAIMS; i++) {
          const t = performance.now();
          await (label.startsWith('its query') ? generic : c).query({ name: label, text, values: values(i) });
          ms.push(performance.now() - t);
        }
        ms.sort((a, b) => a - b);
        const p50 = percentile(ms, 50).toFixed(3);
        const p99 = percentile(ms, 99).toFixed(3);
        log(`round ${round} ${label}: p50 ${p50} ms, p99 ${p99} ms (${CLAIMS} calls)`);
        rows.push([String(round), label, p50, p99]);
        if (round === ROUNDS) summary('claim-seqs', `${label}: p50 ${p50} ms, p99 ${p99} ms`);
      }
    }
  } finally {
    await c.end();
    await generic.end();
  }
  console.log();
  printTable(['round', 'statement', 'p50 ms', 'p99 ms'], rows);
});
