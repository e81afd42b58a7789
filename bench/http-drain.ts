/**
 * Drain a backlog through the HTTP transport (one POST per event, keep-alive
 * pool) to an in-process node:http receiver answering 204, next to the same
 * drain to a no-op transport in the same run. The relay runs in a child
 * process; the receiver in this one.
 *
 *   node --conditions=development --import tsx bench/http-drain.ts
 *
 * Settings: BENCH_EVENTS (200000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES (2).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Backlog, envInt, fmtInt, log, mb, pct, perSec, summary, withBench, type Bench } from './lib.ts';
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
    requests -= before;
    const noopRate = perSec(noop.published, noop.ms);
    const httpRate = perSec(http.published, http.ms);
    log(`receiver got ${fmtInt(requests)} requests`);
    summary('http-drain', `HTTP ${fmtInt(httpRate)} events/s vs no-op ${fmtInt(noopRate)} events/s (${pct(httpRate / noopRate)}); relay max RSS ${mb(http.rssMax)} MB; receiver got ${fmtInt(requests)} requests`);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
