/**
 * Drain benchmark: how fast the relay empties a backlog to a transport that
 * acks at once, against the raw SQL drain limit measured in the same run
 * (batched claim-and-delete / claim-and-mark loops with no relay). Also
 * samples the relay process's RSS (the relay runs in a child process).
 *
 *   node --conditions=development --import tsx bench/drain.ts
 *
 * Settings (environment): BENCH_EVENTS (200000), BENCH_KEYS (1000),
 * BENCH_BATCH (500), BENCH_LANES (2), BENCH_RAW_WORKERS (1,2),
 * BENCH_BATCH_SIZES (200,500,1000), BENCH_LANES_LIST (1,2,4),
 * BENCH_TABLE_EVENTS (BENCH_EVENTS), BENCH_SKIP_TABLE=1 to skip the table.
 */
import { countByState, envInt, envList, fmtInt, loadBacklog, log, mb, pct, perSec, printTable, rawDrain, resetOutbox, summary, withBench, type Bench, type RawKind } from './lib.ts';
import { startRelayWorker, type RelayWorkerResult } from './relay-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const RAW_WORKERS = envList('BENCH_RAW_WORKERS', [1, 2]);
const TABLE_BATCHES = envList('BENCH_BATCH_SIZES', [200, 500, 1000]);
const TABLE_LANES = envList('BENCH_LANES_LIST', [1, 2, 4]);
const TABLE_EVENTS = envInt('BENCH_TABLE_EVENTS', EVENTS);
const SKIP_TABLE = process.env.BENCH_SKIP_TABLE === '1';

async function fresh(bench: Bench, events: number): Promise<void> {
  await resetOutbox(bench);
  const ms = await loadBacklog(bench, events, KEYS);
  log(`loaded ${fmtInt(events)} events over ${KEYS} keys in ${(ms / 1000).toFixed(1)} s (${fmtInt(perSec(events, ms))}/s, not timed)`);
}

async function raw(bench: Bench, kind: RawKind, workers: number): Promise<number> {
  await fresh(bench, EVENTS);
  const r = await rawDrain(bench, kind, BATCH, workers);
  const rate = perSec(r.rows, r.ms);
  log(`raw ${kind.toUpperCase()} drain, batch ${BATCH}, ${workers} connection(s): ${fmtInt(r.rows)} rows in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(rate)} rows/s`);
  return rate;
}

async function relay(bench: Bench, events: number, batchSize: number, lanes: number, deleteOnPublish: boolean): Promise<RelayWorkerResult & { rate: number }> {
  await fresh(bench, events);
  const worker = startRelayWorker({ schema: bench.schema, batchSize, lanes, deleteOnPublish, expect: events, transport: { kind: 'noop' } });
  const r = await worker.result;
  const states = await countByState(bench);
  const rate = perSec(r.published, r.ms);
  const mode = deleteOnPublish ? 'deleteOnPublish' : 'keep (default)';
  log(
    `relay no-op, ${mode}, batch ${batchSize}, lanes ${lanes}: ${fmtInt(r.published)} in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(rate)} events/s; ` +
      `claim SQL ${fmtInt(r.claimMs)} ms over ${r.claims} claims (avg ${(r.claimMs / Math.max(1, r.claims)).toFixed(1)} ms, first tenth ${r.claimMsFirstTenth.toFixed(1)}, last tenth ${r.claimMsLastTenth.toFixed(1)}), ` +
      `complete SQL ${fmtInt(r.completeMs)} ms over ${r.completes}; summed over lanes, which overlap; ` +
      `relay RSS ${mb(r.rssBaseline)} MB at start, max ${mb(r.rssMax)} MB; rows left ${JSON.stringify(states)}`,
  );
  if (r.errors.length > 0) log(`  relay errors: ${r.errors.join(' | ')}`);
  return { ...r, rate };
}

await withBench('drain', async (bench) => {
  log(`drain benchmark: ${fmtInt(EVENTS)} events, ${KEYS} keys, ~300-byte payloads, batch ${BATCH}, lanes ${LANES}, schema ${bench.schema}`);
  // Interleaved, so that slow phases of a noisy machine do not all land on one side.
  const rawDelete: number[] = [];
  const rawUpdate: number[] = [];
  rawDelete.push(await raw(bench, 'delete', RAW_WORKERS[0]!));
  const relayDelete = await relay(bench, EVENTS, BATCH, LANES, true);
  rawUpdate.push(await raw(bench, 'update', RAW_WORKERS[0]!));
  const relayKeep = await relay(bench, EVENTS, BATCH, LANES, false);
  for (const w of RAW_WORKERS.slice(1)) {
    rawDelete.push(await raw(bench, 'delete', w));
    rawUpdate.push(await raw(bench, 'update', w));
  }
  const limitDelete = Math.max(...rawDelete);
  const limitUpdate = Math.max(...rawUpdate);

  console.log('\nHeadline (events/s, no-op transport, relay in a child process):');
  printTable(
    ['mode', 'events/s', 'raw limit (rows/s)', 'relay / raw', 'relay max RSS MB'],
    [
      ['relay, keep rows (default)', fmtInt(relayKeep.rate), `${fmtInt(limitUpdate)} (UPDATE)`, pct(relayKeep.rate / limitUpdate), mb(relayKeep.rssMax)],
      ['relay, deleteOnPublish', fmtInt(relayDelete.rate), `${fmtInt(limitDelete)} (DELETE)`, pct(relayDelete.rate / limitDelete), mb(relayDelete.rssMax)],
      ['raw DELETE drain', rawDelete.map(fmtInt).join(' / '), `workers ${RAW_WORKERS.join(' / ')}`, '', ''],
      ['raw UPDATE drain', rawUpdate.map(fmtInt).join(' / '), `workers ${RAW_WORKERS.join(' / ')}`, '', ''],
    ],
  );
  summary('drain', `relay keep ${fmtInt(relayKeep.rate)}/s = ${pct(relayKeep.rate / limitUpdate)} of raw UPDATE ${fmtInt(limitUpdate)}/s (target >= 60%)`);
  summary('drain', `relay deleteOnPublish ${fmtInt(relayDelete.rate)}/s = ${pct(relayDelete.rate / limitDelete)} of raw DELETE ${fmtInt(limitDelete)}/s (target >= 60%)`);
  summary('memory', `relay process max RSS ${mb(Math.max(relayKeep.rssMax, relayDelete.rssMax))} MB (baseline ${mb(relayKeep.rssBaseline)} MB before start; target <= 150 MB)`);

  if (SKIP_TABLE) return;
  console.log(`\nBatch size x lanes, keep rows (default retention), ${fmtInt(TABLE_EVENTS)} events:`);
  const rows: string[][] = [];
  let maxRss = 0;
  for (const batchSize of TABLE_BATCHES) {
    for (const lanes of TABLE_LANES) {
      const r = await relay(bench, TABLE_EVENTS, batchSize, lanes, false);
      maxRss = Math.max(maxRss, r.rssMax);
      rows.push([String(batchSize), String(lanes), fmtInt(r.rate), pct(r.rate / limitUpdate), (r.claimMs / Math.max(1, r.claims)).toFixed(1), mb(r.rssMax)]);
    }
  }
  console.log('');
  printTable(['batch', 'lanes', 'events/s', 'vs raw UPDATE', 'avg claim ms', 'max RSS MB'], rows);
  const best = rows.reduce((a, b) => (Number(b[2]!.replace(/,/g, '')) > Number(a[2]!.replace(/,/g, '')) ? b : a));
  summary('drain', `best of table: batch ${best[0]}, lanes ${best[1]}: ${best[2]}/s = ${best[3]} of raw UPDATE; max RSS over table ${mb(maxRss)} MB`);
});
