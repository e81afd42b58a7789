/**
 * Experiment (not a benchmark of txbox as shipped): how much of the relay's
 * drain time goes to the fence join of its complete statement. The store's
 * statement joins `input` (one row per event) with `fence` (one row per
 * leased bucket in the batch); the planner estimates the fence at 1 row and
 * runs a nested loop over every pair, so each complete costs O(buckets x batch).
 * The variant checks the same fence with `= ANY` over a (bucket, token) array
 * computed once (bench/relay-worker.ts, `complete: 'any-array'`).
 * Same backlog, same relay, alternating store statement and variant.
 *
 *   node --conditions=txbox-source --import tsx bench/complete-experiment.ts
 *
 * Settings: BENCH_EVENTS (200000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES_LIST (1,2).
 */
import { Backlog, countByState, envInt, envList, fmtInt, log, perSec, printTable, summary, withBench, type Bench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envList('BENCH_LANES_LIST', [1, 2]);

async function run(bench: Bench, backlog: Backlog, lanes: number, deleteOnPublish: boolean, complete: 'src' | 'any-array') {
  await backlog.restore();
  const r = await startRelayWorker({ schema: bench.schema, batchSize: BATCH, lanes, deleteOnPublish, expect: EVENTS, transport: { kind: 'noop' }, complete }).result;
  const rate = perSec(r.published, r.ms);
  const avgComplete = r.completeMs / Math.max(1, r.completes);
  const left = await countByState(bench);
  if ((left.pending ?? 0) > 0 || r.fenced > 0) log(`  check: rows ${JSON.stringify(left)}, fenced ${r.fenced}`);
  log(`lanes ${lanes}, ${deleteOnPublish ? 'deleteOnPublish' : 'keep'}, complete ${complete}: ${fmtInt(rate)} events/s, avg complete ${avgComplete.toFixed(1)} ms, avg claim ${(r.claimMs / Math.max(1, r.claims)).toFixed(1)} ms${r.errors.length ? `; errors ${r.errors.join(' | ')}` : ''}`);
  return { rate, avgComplete };
}

await withBench('completex', async (bench) => {
  log(`complete-statement experiment: ${fmtInt(EVENTS)} events, ${KEYS} keys, batch ${BATCH}, schema ${bench.schema}`);
  const backlog = await Backlog.create(bench, EVENTS, KEYS);
  const rows: string[][] = [];
  for (const lanes of LANES) {
    for (const deleteOnPublish of [false, true]) {
      const src = await run(bench, backlog, lanes, deleteOnPublish, 'src');
      const alt = await run(bench, backlog, lanes, deleteOnPublish, 'any-array');
      const mode = deleteOnPublish ? 'deleteOnPublish' : 'keep';
      rows.push([String(lanes), mode, fmtInt(src.rate), src.avgComplete.toFixed(1), fmtInt(alt.rate), alt.avgComplete.toFixed(1), `${(alt.rate / src.rate).toFixed(2)}x`]);
      summary('complete-experiment', `lanes ${lanes}, ${mode}: store statement ${fmtInt(src.rate)}/s (complete ${src.avgComplete.toFixed(1)} ms) vs any-array fence ${fmtInt(alt.rate)}/s (complete ${alt.avgComplete.toFixed(1)} ms)`);
    }
  }
  console.log('');
  printTable(['lanes', 'retention', 'src events/s', 'src complete ms', 'variant events/s', 'variant complete ms', 'speed-up'], rows);
});
