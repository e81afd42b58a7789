/**
 * A relay process as `txbox relay` runs it: plain node over the built package
 * (dist/, no tsx, no benchmark modules), a no-op transport. Used by
 * bench/wal.ts (BENCH_RELAY_BUILD=dist) to measure the relay's RSS without the
 * TypeScript loader and the benchmark's own imports, which bench/relay-worker.ts
 * carries. Build first: `rm -rf dist && npx tsc -p tsconfig.build.json`.
 * Same configuration (BENCH_RELAY_WORKER) and messages as bench/relay-worker.ts,
 * for the fields a no-op drain uses.
 */
import { createRelay } from 'txbox';
import { pgConnection, PostgresRelayStore } from 'txbox/postgres';

const config = JSON.parse(process.env.BENCH_RELAY_WORKER ?? '{}');
const DATABASE_URL = process.env.BENCH_DATABASE_URL ?? process.env.TXBOX_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const send = (m) => process.send?.(m);

const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: config.lanes + 2 });
const store = new PostgresRelayStore({ schema: config.schema, connection, deleteOnPublish: config.deleteOnPublish, wake: config.wake ?? 'notify' });
const transport = { name: 'noop', async publish(events) { return events.map(() => ({ ok: true })); }, async close() {} };
const relay = createRelay({ store, transport, batchSize: config.batchSize, lanes: config.lanes, ...(config.pollIntervalMs === undefined ? {} : { pollIntervalMs: config.pollIntervalMs }) });
const errors = {};
relay.on('error', (e) => {
  const what = `${e.phase}: ${e.error.message}`;
  errors[what] = (errors[what] ?? 0) + 1;
});
let rssMax = 0;
let heapMax = 0;
const sample = () => {
  const m = process.memoryUsage();
  rssMax = Math.max(rssMax, m.rss);
  heapMax = Math.max(heapMax, m.heapUsed);
};
const rssBaseline = process.memoryUsage().rss;
sample();
const sampler = setInterval(sample, 100);
let published = 0;
let batches = 0;
let doneAt;
let cpuMs;
let finish;
const finished = new Promise((resolve) => (finish = resolve));
const started = performance.now();
const cpuStart = process.cpuUsage();
relay.on('batch', (b) => {
  published += b.published;
  batches++;
  if (config.expect !== undefined && doneAt === undefined && published >= config.expect) {
    doneAt = performance.now();
    const cpu = process.cpuUsage(cpuStart);
    cpuMs = (cpu.user + cpu.system) / 1000;
    finish();
  }
});
process.on('message', (m) => {
  if (m?.type === 'stop') {
    doneAt ??= performance.now();
    finish();
  }
});
try {
  await relay.start();
  send({ type: 'started' });
  await finished;
  clearInterval(sampler);
  sample();
  await relay.stop();
  await connection.close();
  const result = {
    published, ms: doneAt - started, batches, claims: 0, emptyClaims: 0, claimMs: 0, claimMsFirstTenth: 0, claimMsLastTenth: 0, completes: 0, completeMs: 0,
    rssBaseline, rssMax, heapMax, errors: Object.entries(errors).map(([w, n]) => `${w} (x${n})`), fenced: 0, deadlocks: 0, ...(cpuMs === undefined ? {} : { cpuMs }),
  };
  await new Promise((resolve) => process.send({ type: 'result', result }, undefined, {}, () => resolve()));
  process.disconnect?.();
} catch (err) {
  send({ type: 'error', message: err.stack ?? err.message });
  process.exitCode = 1;
}
