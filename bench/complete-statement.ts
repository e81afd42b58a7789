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
 *   by-bucket  the store's mark of a batch whose every event was published (completePublishedSql): the
 *              rows found by one index scan of their seqs (`seq = ANY`) instead of a join with the
 *              unnested input, the fence checked per bucket (the token the batch holds for each bucket)
 *              instead of per row; planned per call, and `by-bucket-prepared` the same as a named statement
 *
 *   node --conditions=txbox-source --import tsx bench/complete-statement.ts
 */
import { Backlog, bareMarkSql, DATABASE_URL, envInt, envList, log, withBench } from './lib.ts';
import pg from 'pg';
import { claimSql, completeFnSql, completePublishedSql, completeSql } from '../src/stores/postgres/postgres-sql.ts';

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
    // completePublishedSql's parameters: the batch's buckets and the token of each (one per bucket here).
    const byBucket = (values: unknown[]): unknown[] => {
      const tokens = new Map<number, string>();
      (values[1] as string[]).forEach((q, i) => tokens.set(bucketOfSeq.get(q)!, (values[2] as string[])[i]!));
      return [values[0], values[1], [...tokens.keys()], [...tokens.values()]];
    };
    const forms = {
      'per-call': (values: unknown[]) => ({ text: completeSql(n, false, false), values }),
      prepared: (values: unknown[], size: number) => ({ name: `bench_complete_${size}`, text: completeSql(n, false, false), values }),
      function: (values: unknown[]) => ({ name: 'bench_complete_fn', text: completeFnSql(n, false, false), values }),
      bare: (values: unknown[]) => ({ name: 'bench_bare_mark', text: bareMarkSql(n.outbox), values: [values[1]] }),
      'by-bucket': (values: unknown[]) => ({ text: completePublishedSql(n, false, false), values: byBucket(values) }),
      'by-bucket-prepared': (values: unknown[]) => ({ name: 'bench_by_bucket', text: completePublishedSql(n, false, false), values: byBucket(values) }),
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
