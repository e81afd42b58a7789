/**
 * Drain a backlog through the HTTP transport (one POST per event, keep-alive
 * pool) to an in-process node:http receiver answering 204, next to the same
 * drain to a no-op transport in the same run. The relay runs in a child
 * process (bench/relay-worker.ts, under tsx); the receiver in this one.
 * Then the same HTTP drain through the production entry point, `txbox relay`
 * compiled to dist/ (built first with `npm run build`) and run by plain
 * node, sampling its RSS from /proc: the relay's memory without the tsx
 * loader, which adds about 30 MB to the worker's.
 *
 *   node --conditions=txbox-source --import tsx bench/http-drain.ts
 *
 * Settings: BENCH_EVENTS (200000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES (2).
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Backlog, DATABASE_URL, envInt, fmtInt, log, mb, pct, perSec, summary, withBench, type Bench } from './lib.ts';
import { startRelayWorker, type RelayWorkerResult } from './relay-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);

async function drain(bench: Bench, backlog: Backlog, transport: { kind: 'noop' } | { kind: 'http'; url: string }): Promise<RelayWorkerResult> {
  await backlog.restore();
  const r = await startRelayWorker({ schema: bench.schema, batchSize: BATCH, lanes: LANES, deleteOnPublish: false, expect: EVENTS, transport }).result;
  log(
    `relay -> ${transport.kind}: ${fmtInt(r.published)} in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(perSec(r.published, r.ms))} events/s; ` +
      `claim SQL ${fmtInt(r.claimMs)} ms, complete SQL ${fmtInt(r.completeMs)} ms (summed over lanes); relay max RSS ${mb(r.rssMax)} MB (max heap used ${mb(r.heapMax)} MB)` +
      (r.errors.length ? `; errors ${r.errors.join(' | ')}` : ''),
  );
  return r;
}

/** VmRSS of a process, in bytes (0 once it has gone). */
function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** The same HTTP drain through `node dist/cli/main.js relay`, until the receiver has `expect` more requests; then SIGTERM. */
async function drainWithCli(bench: Bench, backlog: Backlog, url: string, received: () => number): Promise<{ ms: number; rssMax: number }> {
  await backlog.restore();
  const start = received();
  const args = ['dist/cli/main.js', 'relay', '--transport', 'http', '--endpoint', `orders=${url}`, '--database-url', DATABASE_URL, '--schema', bench.schema,
    '--batch-size', String(BATCH), '--lanes', String(LANES), '--keep-published', 'off', '--unsigned', '--log-level', 'warn'];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  const started = performance.now();
  let rssMax = 0;
  while (received() - start < EVENTS) {
    if (child.exitCode !== null) throw new Error(`txbox relay exited with code ${child.exitCode}`);
    rssMax = Math.max(rssMax, rssOf(child.pid!));
    await new Promise((r) => setTimeout(r, 100));
  }
  const ms = performance.now() - started;
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  log(`txbox relay (dist, no tsx) -> http: ${fmtInt(EVENTS)} in ${(ms / 1000).toFixed(2)} s = ${fmtInt(perSec(EVENTS, ms))} events/s (process start included); max RSS ${mb(rssMax)} MB`);
  return { ms, rssMax };
}

await withBench('httpdrain', async (bench) => {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      res.statusCode = 204;
      res.end();
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/orders`;
  try {
    log(`HTTP drain benchmark: ${fmtInt(EVENTS)} events, ${KEYS} keys, batch ${BATCH}, lanes ${LANES}, keep rows, receiver ${url}, schema ${bench.schema}`);
    const backlog = await Backlog.create(bench, EVENTS, KEYS);
    const noop = await drain(bench, backlog, { kind: 'noop' });
    const before = requests;
    const http = await drain(bench, backlog, { kind: 'http', url });
    const got = requests - before;
    const noopRate = perSec(noop.published, noop.ms);
    const httpRate = perSec(http.published, http.ms);
    log(`receiver got ${fmtInt(got)} requests`);
    execFileSync('npm', ['run', 'build'], { stdio: 'ignore' });
    const cli = await drainWithCli(bench, backlog, url, () => requests);
    summary(
      'http-drain',
      `HTTP ${fmtInt(httpRate)} events/s vs no-op ${fmtInt(noopRate)} events/s (${pct(httpRate / noopRate)}); relay max RSS ${mb(http.rssMax)} MB under tsx, ` +
        `${mb(cli.rssMax)} MB as txbox relay (dist); receiver got ${fmtInt(got)} requests`,
    );
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
