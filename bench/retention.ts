/**
 * Retention cost: the two ways published rows leave the outbox.
 *   delete-on-publish: the relay deletes each row when it marks it (PostgresRelayStore `deleteOnPublish: true`);
 *   keep + prune:      the relay marks rows published (the default), and later
 *                      `PostgresAdmin.prune(0, 5000)` deletes them in batches of 5000.
 * Both drain the same backlog through a relay (child process) to a no-op
 * transport; a VACUUM afterwards is timed too (dead rows are a cost either
 * way, and autovacuum may be off). Repeated BENCH_REPEAT times, alternating.
 *
 *   node --conditions=txbox-source --import tsx bench/retention.ts
 *
 * Settings: BENCH_EVENTS (200000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES (2),
 * BENCH_PRUNE_BATCH (5000), BENCH_REPEAT (2).
 */
import { PostgresAdmin } from 'txbox/postgres';
import { Backlog, countByState, envInt, fmtInt, log, mb, median, perSec, printTable, summary, withBench, type Bench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const PRUNE_BATCH = envInt('BENCH_PRUNE_BATCH', 5000);
const REPEAT = envInt('BENCH_REPEAT', 2);

async function tableBytes(bench: Bench): Promise<number> {
  const [r] = await bench.sql<{ b: string }>(`SELECT pg_total_relation_size($1::regclass) AS b`, [bench.names.outbox]);
  return Number(r!.b);
}

async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t = performance.now();
  const value = await fn();
  return { ms: performance.now() - t, value };
}

async function drain(bench: Bench, backlog: Backlog, deleteOnPublish: boolean): Promise<number> {
  await backlog.restore();
  const before = await tableBytes(bench);
  const r = await startRelayWorker({ schema: bench.schema, batchSize: BATCH, lanes: LANES, deleteOnPublish, expect: EVENTS, transport: { kind: 'noop' } }).result;
  log(
    `${deleteOnPublish ? 'delete-on-publish' : 'keep'} drain: ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(perSec(EVENTS, r.ms))} events/s; ` +
      `rows ${JSON.stringify(await countByState(bench))}; outbox ${mb(before)} MB before, ${mb(await tableBytes(bench))} MB after` +
      (r.errors.length ? `; relay errors ${r.errors.join(' | ')}` : ''),
  );
  return r.ms;
}

async function vacuum(bench: Bench): Promise<number> {
  const v = await timed(() => bench.sql(`VACUUM ${bench.names.outbox}`));
  log(`  VACUUM: ${(v.ms / 1000).toFixed(2)} s; outbox ${mb(await tableBytes(bench))} MB after`);
  return v.ms;
}

await withBench('retention', async (bench) => {
  log(`retention benchmark: ${fmtInt(EVENTS)} events, ${KEYS} keys, relay batch ${BATCH}, lanes ${LANES}, prune batch ${PRUNE_BATCH}, ${REPEAT} repeat(s), schema ${bench.schema}`);
  const [av] = await bench.sql<{ setting: string }>(`SELECT setting FROM pg_settings WHERE name = 'autovacuum'`);
  log(`server autovacuum: ${av?.setting}`);
  const backlog = await Backlog.create(bench, EVENTS, KEYS);
  const admin = new PostgresAdmin(bench.connection, { schema: bench.schema });
  const del: { drain: number; vacuum: number }[] = [];
  const keep: { drain: number; prune: number; vacuum: number }[] = [];
  for (let rep = 1; rep <= REPEAT; rep++) {
    log(`--- repeat ${rep}/${REPEAT}`);
    const order = rep % 2 === 1 ? [true, false] : [false, true];
    for (const deleteOnPublish of order) {
      const drainMs = await drain(bench, backlog, deleteOnPublish);
      if (deleteOnPublish) {
        del.push({ drain: drainMs, vacuum: await vacuum(bench) });
        continue;
      }
      const batchMs: number[] = [];
      let last = performance.now();
      const prune = await timed(() =>
        admin.prune(0, PRUNE_BATCH, () => {
          const now = performance.now();
          batchMs.push(now - last);
          last = now;
        }),
      );
      const ms = (xs: number[]): string => xs.map((m) => m.toFixed(0)).join(', ');
      log(`  prune(0, ${PRUNE_BATCH}): ${fmtInt(prune.value)} rows in ${(prune.ms / 1000).toFixed(2)} s = ${fmtInt(perSec(prune.value, prune.ms))} rows/s; batch ms first [${ms(batchMs.slice(0, 3))}] last [${ms(batchMs.slice(-3))}]; rows left ${JSON.stringify(await countByState(bench))}`);
      keep.push({ drain: drainMs, prune: prune.ms, vacuum: await vacuum(bench) });
    }
  }

  const us = (ms: number): string => ((ms * 1000) / EVENTS).toFixed(1);
  const d = { drain: median(del.map((x) => x.drain)), vacuum: median(del.map((x) => x.vacuum)) };
  const k = { drain: median(keep.map((x) => x.drain)), prune: median(keep.map((x) => x.prune)), vacuum: median(keep.map((x) => x.vacuum)) };
  const dTotal = median(del.map((x) => x.drain + x.vacuum));
  const kTotal = median(keep.map((x) => x.drain + x.prune + x.vacuum));
  console.log(`\nMedians of ${REPEAT} repeat(s), cost per event in µs (wall time / ${fmtInt(EVENTS)}):`);
  printTable(
    ['mode', 'drain events/s', 'prune rows/s', 'drain µs/ev', 'prune µs/ev', 'vacuum µs/ev', 'total µs/ev'],
    [
      ['delete-on-publish', fmtInt(perSec(EVENTS, d.drain)), '-', us(d.drain), '-', us(d.vacuum), us(dTotal)],
      ['keep + prune', fmtInt(perSec(EVENTS, k.drain)), fmtInt(perSec(EVENTS, k.prune)), us(k.drain), us(k.prune), us(k.vacuum), us(kTotal)],
    ],
  );
  summary('retention', `delete-on-publish ${us(dTotal)} µs/event in all (drain ${fmtInt(perSec(EVENTS, d.drain))}/s) vs keep + prune ${us(kTotal)} µs/event (drain ${fmtInt(perSec(EVENTS, k.drain))}/s, prune ${fmtInt(perSec(EVENTS, k.prune))} rows/s); ratio ${(kTotal / dTotal).toFixed(2)}`);
});
