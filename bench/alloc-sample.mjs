/**
 * What a process allocates, by function: a preload that runs V8's sampling
 * heap profiler over a window of the run, counting the objects that garbage
 * collection has already freed too (what a scavenge has to sweep, not only
 * what is live at the end), and writes the profile where it is told.
 *
 *   BENCH_ALLOC_FROM_MS=21000 BENCH_ALLOC_TO_MS=31000 BENCH_ALLOC_OUT=/tmp/alloc.heapprofile \
 *     BENCH_SECTIONS=latency BENCH_RATES=500 BENCH_LATENCY_ROUNDS=1 BENCH_PRODUCERS=child \
 *     node --import ./bench/alloc-sample.mjs --conditions=txbox-source --import tsx bench/wal.ts
 *   node bench/alloc-report.mjs /tmp/alloc.heapprofile
 *
 * The window is in ms from the process start (in bench/wal.ts with one rate: 0-10 s the ceiling,
 * 10-21 s NOTIFY, 21-31 s the WAL mode). Sampling every 4 KB slows the process: read the bytes, not
 * the latencies of a sampled run.
 */
import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';

const from = Number(process.env.BENCH_ALLOC_FROM_MS ?? 0);
const to = Number(process.env.BENCH_ALLOC_TO_MS ?? 10_000);
const out = process.env.BENCH_ALLOC_OUT ?? 'alloc.heapprofile';
const session = new Session();
session.connect();
setTimeout(() => {
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
}, from).unref();
setTimeout(() => {
  session.post('HeapProfiler.stopSampling', (err, result) => {
    if (err) {
      console.error('alloc-sample: stopSampling failed', err);
      return;
    }
    writeFileSync(out, JSON.stringify(result.profile));
    console.error(`alloc-sample: ${out} written (${from}-${to} ms)`);
  });
}, to).unref();
