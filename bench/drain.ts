/**
 * Drain benchmark: how fast the relay empties a backlog to a transport that
 * acks at once, against the raw SQL drain limit measured in the same run
 * (batched claim-and-delete / claim-and-mark loops with no relay). The relay
 * runs in a child process whose RSS is sampled every 100 ms.
 *
 *   node --conditions=txbox-source --import tsx bench/drain.ts
 *
 * Every run starts from the same backlog (loaded once through enqueue, then
 * copied back before each run). The headline runs are repeated BENCH_REPEAT
 * times, interleaved (raw DELETE, relay deleteOnPublish, raw UPDATE, relay
 * keep, ...), and each repeat's ratio relay/raw is computed from runs next to
 * each other in time; the median ratio is reported.
 *
 * Settings (environment): BENCH_EVENTS (200000), BENCH_KEYS (1000),
 * BENCH_BATCH (500), BENCH_LANES (2), BENCH_REPEAT (3), BENCH_RAW_WORKERS (1,2),
 * BENCH_BATCH_SIZES (200,500,1000), BENCH_LANES_LIST (1,2,4),
 * BENCH_TABLE_EVENTS (BENCH_EVENTS), BENCH_SKIP_TABLE=1 to skip the table.
 */
import { Backlog, countByState, envInt, envList, fmtInt, log, mb, median, pct, perSec, printTable, rawDrain, summary, withBench, type Bench, type RawKind } from './lib.ts';
import { startRelayWorker, type RelayWorkerResult } from './relay-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const REPEAT = envInt('BENCH_REPEAT', 3);
const RAW_WORKERS = envList('BENCH_RAW_WORKERS', [1, 2]);
const TABLE_BATCHES = envList('BENCH_BATCH_SIZES', [200, 500, 1000]);
const TABLE_LANES = envList('BENCH_LANES_LIST', [1, 2, 4]);
const TABLE_EVENTS = Math.min(EVENTS, envInt('BENCH_TABLE_EVENTS', EVENTS));
const SKIP_TABLE = process.env.BENCH_SKIP_TABLE === '1';

type RelayRun = RelayWorkerResult & { rate: number };

async function raw(bench: Bench, backlog: Backlog, kind: RawKind, workers: number): Promise<number> {
  await backlog.restore();
  const r = await rawDrain(bench, kind, BATCH, workers);
  const rate = perSec(r.rows, r.ms);
  log(`raw ${kind.toUpperCase()} drain, batch ${BATCH}, ${workers} connection(s): ${fmtInt(r.rows)} rows in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(rate)} rows/s`);
  return rate;
}

async function relay(bench: Bench, backlog: Backlog, events: number, batchSize: number, lanes: number, deleteOnPublish: boolean): Promise<RelayRun> {
  await backlog.restore(events);
  const worker = startRelayWorker({ schema: bench.schema, batchSize, lanes, deleteOnPublish, expect: events, transport: { kind: 'noop' } });
  const r = await worker.result;
  const states = await countByState(bench);
  const rate = perSec(r.published, r.ms);
  const mode = deleteOnPublish ? 'deleteOnPublish' : 'keep (default)';
  const sqlShare = (r.claimMs + r.completeMs) / (lanes * r.ms);
  log(
    `relay no-op, ${mode}, batch ${batchSize}, lanes ${lanes}: ${fmtInt(r.published)} in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(rate)} events/s; ` +
      `claim avg ${(r.claimMs / Math.max(1, r.claims)).toFixed(1)} ms (first tenth ${r.claimMsFirstTenth.toFixed(1)}, last tenth ${r.claimMsLastTenth.toFixed(1)}), ` +
      `complete avg ${(r.completeMs / Math.max(1, r.completes)).toFixed(1)} ms; lanes spent ${pct(sqlShare)} of their time waiting on SQL; ` +
      `relay RSS ${mb(r.rssBaseline)} MB at start, max ${mb(r.rssMax)} MB (max heap used ${mb(r.heapMax)} MB); rows left ${JSON.stringify(states)}`,
  );
  if (r.errors.length > 0 || r.fenced > 0) log(`  relay errors: ${r.errors.join(' | ') || 'none'}; completions rejected by the fence: ${r.fenced}`);
  return { ...r, rate };
}

await withBench('drain', async (bench) => {
  log(`drain benchmark: ${fmtInt(EVENTS)} events, ${KEYS} keys, ~300-byte payloads, batch ${BATCH}, lanes ${LANES}, ${REPEAT} repeat(s), schema ${bench.schema}`);
  const backlog = await Backlog.create(bench, EVENTS, KEYS);
  const reps: { rawDelete: number; rawUpdate: number; keep: RelayRun; del: RelayRun }[] = [];
  for (let rep = 1; rep <= REPEAT; rep++) {
    log(`--- repeat ${rep}/${REPEAT}`);
    const rawDelete = [await raw(bench, backlog, 'delete', RAW_WORKERS[0]!)];
    const del = await relay(bench, backlog, EVENTS, BATCH, LANES, true);
    const rawUpdate = [await raw(bench, backlog, 'update', RAW_WORKERS[0]!)];
    const keep = await relay(bench, backlog, EVENTS, BATCH, LANES, false);
    for (const w of RAW_WORKERS.slice(1)) {
      rawDelete.push(await raw(bench, backlog, 'delete', w));
      rawUpdate.push(await raw(bench, backlog, 'update', w));
    }
    reps.push({ rawDelete: Math.max(...rawDelete), rawUpdate: Math.max(...rawUpdate), keep, del });
  }

  console.log(`\nHeadline: relay to a no-op transport (child process) vs the raw SQL limit (best of ${RAW_WORKERS.join('/')} connections), per repeat:`);
  printTable(
    ['repeat', 'relay keep ev/s', 'raw UPDATE rows/s', 'keep / raw', 'relay deleteOnPublish ev/s', 'raw DELETE rows/s', 'delete / raw', 'max RSS MB'],
    reps.map((r, i) => [
      String(i + 1),
      fmtInt(r.keep.rate),
      fmtInt(r.rawUpdate),
      pct(r.keep.rate / r.rawUpdate),
      fmtInt(r.del.rate),
      fmtInt(r.rawDelete),
      pct(r.del.rate / r.rawDelete),
      mb(Math.max(r.keep.rssMax, r.del.rssMax)),
    ]),
  );
  const keepRatio = median(reps.map((r) => r.keep.rate / r.rawUpdate));
  const delRatio = median(reps.map((r) => r.del.rate / r.rawDelete));
  const maxRss = Math.max(...reps.map((r) => Math.max(r.keep.rssMax, r.del.rssMax)));
  summary('drain', `relay keep (default) median ${fmtInt(median(reps.map((r) => r.keep.rate)))}/s; median ratio to raw UPDATE ${pct(keepRatio)} (target >= 60%)`);
  summary('drain', `relay deleteOnPublish median ${fmtInt(median(reps.map((r) => r.del.rate)))}/s; median ratio to raw DELETE ${pct(delRatio)} (target >= 60%)`);
  summary('drain', `raw limits median: DELETE ${fmtInt(median(reps.map((r) => r.rawDelete)))} rows/s, UPDATE ${fmtInt(median(reps.map((r) => r.rawUpdate)))} rows/s`);
  summary('memory', `relay process max RSS ${mb(maxRss)} MB at batch ${BATCH}, lanes ${LANES} (${mb(reps[0]!.keep.rssBaseline)} MB before start; target <= 150 MB)`);

  if (SKIP_TABLE) return;
  const rawUpdateRef = median(reps.map((r) => r.rawUpdate));
  console.log(`\nBatch size x lanes, keep rows (default retention), ${fmtInt(TABLE_EVENTS)} events:`);
  const rows: string[][] = [];
  const runs: { batch: number; lanes: number; r: RelayRun }[] = [];
  for (const batchSize of TABLE_BATCHES) {
    for (const lanes of TABLE_LANES) {
      const r = await relay(bench, backlog, TABLE_EVENTS, batchSize, lanes, false);
      runs.push({ batch: batchSize, lanes, r });
      rows.push([
        String(batchSize),
        String(lanes),
        fmtInt(r.rate),
        pct(r.rate / rawUpdateRef),
        (r.claimMs / Math.max(1, r.claims)).toFixed(1),
        (r.completeMs / Math.max(1, r.completes)).toFixed(1),
        mb(r.rssMax),
        String(r.deadlocks),
      ]);
    }
  }
  console.log('');
  printTable(['batch', 'lanes', 'events/s', 'vs raw UPDATE (median)', 'avg claim ms', 'avg complete ms', 'max RSS MB', 'deadlocks'], rows);
  const best = runs.reduce((a, b) => (b.r.rate > a.r.rate ? b : a));
  const rss = runs.reduce((a, b) => (b.r.rssMax > a.r.rssMax ? b : a));
  summary('drain', `table best: batch ${best.batch}, lanes ${best.lanes}: ${fmtInt(best.r.rate)}/s = ${pct(best.r.rate / rawUpdateRef)} of raw UPDATE`);
  summary('memory', `table max RSS ${mb(rss.r.rssMax)} MB at batch ${rss.batch}, lanes ${rss.lanes}`);
});
