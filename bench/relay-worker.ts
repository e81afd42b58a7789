/**
 * A relay in its own process, so that its RSS is not mixed with the memory of
 * the benchmark that loads the backlog or runs producers. Started by
 * `startRelayWorker` (bench/relay-process.ts); configured by the
 * BENCH_RELAY_WORKER environment variable (JSON); reports over IPC.
 *
 * It wraps the PostgresRelayStore in a timing decorator (users may pass any
 * RelayStore) to split the drain time into claim SQL, complete SQL and the rest.
 */
import { createRelay, type BucketLease, type ClaimOptions, type Completion, type RelayHeartbeat, type RelayStore, type Transport } from 'txbox';
import { pgConnection, PostgresRelayStore } from 'txbox/postgres';
import { DATABASE_URL, MemorySampler, NoopTransport } from './lib.ts';
import type { RelayWorkerConfig, RelayWorkerMessage, RelayWorkerResult } from './relay-process.ts';

class TimedRelayStore implements RelayStore {
  claims: number[] = [];
  emptyClaims = 0;
  completeMs = 0;
  completes = 0;
  constructor(private readonly inner: RelayStore) {}

  heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    return this.inner.heartbeat(relay, ttlMs);
  }
  lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number) {
    return this.inner.lease(relayId, held, acquire, ttlMs);
  }
  release(relayId: string, leases: readonly BucketLease[]) {
    return this.inner.release(relayId, leases);
  }
  async claim(leases: readonly BucketLease[], options: ClaimOptions) {
    const t = performance.now();
    const events = await this.inner.claim(leases, options);
    if (events.length === 0) this.emptyClaims++;
    else this.claims.push(performance.now() - t);
    return events;
  }
  async complete(relayId: string, completions: readonly Completion[]) {
    const t = performance.now();
    const r = await this.inner.complete(relayId, completions);
    this.completeMs += performance.now() - t;
    this.completes++;
    return r;
  }
  waitForEvents(timeoutMs: number, signal: AbortSignal) {
    return this.inner.waitForEvents(timeoutMs, signal);
  }
  close() {
    return this.inner.close();
  }
}

/** The HTTP transport is loaded by name at run time, so that this file compiles before src/transports/http exists. */
async function makeTransport(config: RelayWorkerConfig): Promise<Transport> {
  if (config.transport.kind === 'noop') return new NoopTransport();
  const specifier = 'txbox/http';
  const mod = (await import(specifier)) as { HttpTransport: new (options: { endpoints: Record<string, string>; timeoutMs?: number }) => Transport };
  return new mod.HttpTransport({ endpoints: { orders: config.transport.url }, timeoutMs: 10_000 });
}

function send(message: RelayWorkerMessage): void {
  process.send?.(message);
}

async function main(): Promise<void> {
  const config = JSON.parse(process.env.BENCH_RELAY_WORKER ?? '{}') as RelayWorkerConfig;
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: config.lanes + 2 });
  const store = new TimedRelayStore(new PostgresRelayStore({ schema: config.schema, connection, deleteOnPublish: config.deleteOnPublish }));
  const transport = await makeTransport(config);
  const relay = createRelay({
    store,
    transport,
    batchSize: config.batchSize,
    lanes: config.lanes,
    ...(config.pollIntervalMs === undefined ? {} : { pollIntervalMs: config.pollIntervalMs }),
  });
  const errors: string[] = [];
  relay.on('error', (e) => {
    if (errors.length < 5) errors.push(`${e.phase}: ${e.error.message}`);
  });
  let published = 0;
  let batches = 0;
  let doneAt: number | undefined;
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const rssBaseline = process.memoryUsage().rss;
  const memory = new MemorySampler(100);
  const started = performance.now();
  relay.on('batch', (b) => {
    published += b.published;
    batches++;
    if (config.expect !== undefined && doneAt === undefined && published >= config.expect) {
      doneAt = performance.now();
      finish();
    }
  });
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'stop') {
      doneAt ??= performance.now();
      finish();
    }
  });
  await relay.start();
  send({ type: 'started' });
  await finished;
  memory.stop();
  await relay.stop();
  await connection.close();
  const claims = store.claims;
  const tenth = Math.max(1, Math.floor(claims.length / 10));
  const avg = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const result: RelayWorkerResult = {
    published,
    ms: (doneAt ?? performance.now()) - started,
    batches,
    claims: claims.length,
    emptyClaims: store.emptyClaims,
    claimMs: claims.reduce((a, b) => a + b, 0),
    claimMsFirstTenth: avg(claims.slice(0, tenth)),
    claimMsLastTenth: avg(claims.slice(-tenth)),
    completes: store.completes,
    completeMs: store.completeMs,
    rssBaseline,
    rssMax: memory.maxRss,
    heapMax: memory.maxHeapUsed,
    errors,
  };
  send({ type: 'result', result });
}

main().catch((err: Error) => {
  send({ type: 'error', message: err.stack ?? err.message });
  process.exitCode = 1;
});
