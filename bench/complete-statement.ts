/**
 * What the relay's mark costs PostgreSQL by batch size, the statement alone
 * (no relay): a backlog of BENCH_EVENTS (20000) rows, every bucket leased to
 * one relay id, then for each size in BENCH_SIZES (1,8,32,64,128,500) the
 * mark of that many claimed rows as published, BENCH_CALLS (30) times after
 * 10 unmeasured, each in a transaction rolled back (so the same rows every
 * time). Forms, each timed at the client:
 *
 *   per-call   completeSql's text unnamed: parsed and planned on every call (full batches)
 *   prepared   the same text as a named statement, PostgreSQL's choice of custom or generic plan
 *   function   migration 010's `<table>_complete` (small batches): one plan per session, index lookups
 *   bare       `UPDATE ... WHERE seq = ANY($1)`: the same rows marked with no fence, no held rows, no failures
 *   by-bucket  an experiment, not the store's: the published rows found by one index scan of their seqs
 *              (`seq = ANY`) instead of a join with the unnested input, the fence checked per bucket (the
 *              token the batch holds for each bucket, one per bucket, in a 256-slot array) instead of per
 *              row; publishes only (no failures), prepared
 *
 *   node --conditions=txbox-source --import tsx bench/complete-statement.ts
 */
import { Backlog, bareMarkSql, DATABASE_URL, envInt, envList, log, withBench } from './lib.ts';
import pg from 'pg';
import { claimSql, completeFnSql, completeSql } from '../src/stores/postgres/postgres-sql.ts';

const EVENTS = envInt('BENCH_EVENTS', 20_000);
const SIZES = envList('BENCH_SIZES', [1, 8, 32, 64, 128, 500]);
const CALLS = envInt('BENCH_CALLS', 30);

await withBench('completestmt', async (bench) => {
  const backlog = await Backlog.create(bench, EVENTS, 1000);
  await backlog.restore(EVENTS);
  const n = bench.names;
  const c = new pg.Client({ connectionString: DATABASE_URL });
  await c.connect();
  try {
    await c.query(`UPDATE ${n.buckets} SET owner = 'bench', token = bucket + 1, lease_until = now() + interval '1 hour'`);
    const { rows: buckets } = await c.query<{ bucket: number; token: string }>(`SELECT bucket, token FROM ${n.buckets} ORDER BY bucket`);
    const tokenOf = new Map(buckets.map((b) => [b.bucket, b.token]));
    let bucketOfSeq = new Map<string, number>();
    const forms = {
      'per-call': (values: unknown[]) => ({ text: completeSql(n, false, false), values }),
      prepared: (values: unknown[], size: number) => ({ name: `bench_complete_${size}`, text: completeSql(n, false, false), values }),
      function: (values: unknown[]) => ({ name: 'bench_complete_fn', text: completeFnSql(n, false, false), values }),
      bare: (values: unknown[]) => ({ name: 'bench_bare_mark', text: bareMarkSql(n.outbox), values: [values[1]] }),
      'by-bucket': (values: unknown[]) => {
        // The batch's token of each bucket (every row of a bucket was claimed under the same lease here).
        const tok = new Array<string>(256).fill('0');
        const seqs = values[1] as string[];
        const toks = values[2] as string[];
        seqs.forEach((q, i) => (tok[bucketOfSeq.get(q)!] = toks[i]!));
        return {
          name: 'bench_by_bucket',
          text: `WITH fence AS (
  SELECT b.bucket FROM ${n.buckets} b
  WHERE b.owner = $1 AND b.lease_until > now() AND b.token = ($3::bigint[])[b.bucket + 1]
  ORDER BY b.bucket FOR SHARE
), lived AS (
  SELECT ARRAY(SELECT f.bucket IS NOT NULL FROM generate_series(0, 255) g(bucket) LEFT JOIN fence f ON f.bucket = g.bucket ORDER BY g.bucket) AS live
), published AS (
  UPDATE ${n.outbox} o SET state = 'published', done_at = now(), attempts = o.attempts + 1, next_attempt_at = NULL
  WHERE o.seq = ANY($2::bigint[]) AND o.state = 'pending' AND ((SELECT live FROM lived)::boolean[])[o.bucket + 1]
  RETURNING o.seq, (o.attempts > 1 OR o.last_error IS NOT NULL) AS blocker
), released AS (
  UPDATE ${n.outbox} h SET held_by = NULL
  WHERE h.held_by = ANY(ARRAY(SELECT seq FROM published WHERE blocker)) AND h.state = 'pending' AND h.seq <> ALL($2::bigint[])
  RETURNING 1
)
SELECT (SELECT count(*) FROM published)::int AS applied, (SELECT count(*) FROM released)::int AS released, set_config('synchronous_commit', 'off', true) AS async_commit`,
          values: ['bench', seqs, `{${tok.join(',')}}`],
        };
      },
    };
    console.log(`\nms per call, mean of ${CALLS} after 10 (rolled back):`);
    console.log(['events', ...Object.keys(forms)].map((h) => h.padStart(10)).join(''));
    for (const size of SIZES) {
      const { rows } = await c.query<{ seq: string; bucket: number }>(claimSql(n), [buckets.map((b) => b.bucket), size, []]);
      const params = ['bench', rows.map((r) => r.seq), rows.map((r) => tokenOf.get(r.bucket)), rows.map(() => 0), rows.map(() => 0), rows.map(() => null), rows.map(() => '')];
      bucketOfSeq = new Map(rows.map((r) => [r.seq, r.bucket]));
      const cells: string[] = [];
      for (const form of Object.values(forms)) {
        let total = 0;
        for (let i = 0; i < CALLS + 10; i++) {
          await c.query('BEGIN');
          const started = performance.now();
          const { rows: answer } = await c.query<{ applied?: number }>(form(params, size));
          // Every form but the bare one says how many rows it marked: all of them, or the comparison is void.
          const applied = answer[0]?.applied;
          if (applied !== undefined && applied !== rows.length) throw new Error(`a form marked ${applied} of ${rows.length} rows`);
          if (i >= 10) total += performance.now() - started;
          await c.query('ROLLBACK');
        }
        cells.push((total / CALLS).toFixed(2));
      }
      console.log([String(rows.length), ...cells].map((x) => x.padStart(10)).join(''));
    }
  } finally {
    await c.end();
  }
  log('done');
});
