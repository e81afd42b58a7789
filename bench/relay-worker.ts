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
import { HttpTransport } from 'txbox/http';
import { pgConnection, PostgresRelayStore, postgresNames, type PostgresConnection } from 'txbox/postgres';
import { brokerTransport } from './broker-transports.ts';
import { NodeHttpBenchTransport } from './node-http-transport.ts';
import { DATABASE_URL, MemorySampler, NoopTransport, recordAcks } from './lib.ts';
import { metricsSetup } from './metrics-setups.ts';
import { openCpuWindow, type CpuWindow } from './cpu-window.ts';
import type { RelayWorkerConfig, RelayWorkerMessage, RelayWorkerResult } from './relay-process.ts';

/**
 * The experiment of bench/complete-experiment.ts: the same fenced mark (or
 * delete) of published events, but the fence is checked with `= ANY` over an
 * array of (bucket, token) pairs computed once, instead of a join that the
 * planner runs as a nested loop over every (fence row, input row) pair because
 * it estimates the fence at one row. Batches with any failed event use the store's own statement.
 */
function anyArrayComplete(schema: string, deleteOnPublish: boolean): string {
  const n = postgresNames({ schema });
  const pairs = `((o.bucket::bigint << 48) | i.token) = ANY (ARRAY(SELECT (f.bucket::bigint << 48) | f.token FROM fence f))`;
  const published = deleteOnPublish
    ? `DELETE FROM ${n.outbox} o USING input i WHERE o.seq = i.seq AND o.state = 'pending' AND ${pairs} RETURNING 1`
    : `UPDATE ${n.outbox} o SET state = 'published', done_at = now(), attempts = o.attempts + 1, next_attempt_at = NULL
       FROM input i WHERE o.seq = i.seq AND o.state = 'pending' AND ${pairs} RETURNING 1`;
  return `WITH input AS (SELECT * FROM unnest($2::bigint[], $3::bigint[]) AS i(seq, token)),
fence AS (
  SELECT b.bucket, b.token FROM ${n.buckets} b
  WHERE b.owner = $1 AND b.lease_until > now() AND b.token IN (SELECT token FROM input)
  FOR SHARE
), published AS (${published})
SELECT (SELECT count(*) FROM published)::int AS applied`;
}

class TimedRelayStore implements RelayStore {
  claims: number[] = [];
  emptyClaims = 0;
  completeMs = 0;
  completes = 0;
  readonly prune?: (olderThanMs: number, limit: number) => Promise<number>;
  /** With tracing: event id -> [claim sent, claim returned] (wall clock). */
  claimedAt: Map<string, [number, number]> | null = null;
  /** Claims wait for this (the parent's `go`) when set. */
  gate: Promise<void> | null = null;
  constructor(
    private readonly inner: RelayStore,
    private readonly experiment?: { readonly sql: string; readonly db: PostgresConnection },
  ) {
    const prune = inner.prune?.bind(inner);
    if (prune) this.prune = prune;
  }

  heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    return this.inner.heartbeat(relay, ttlMs);
  }
  lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number) {
    return this.inner.lease(relayId, held, acquire, ttlMs);
  }
  release(relayId: string, leases: readonly BucketLease[]) {
    return this.inner.release(relayId, leases);
  }
  leave(relayId: string, held: readonly BucketLease[]) {
    return this.inner.leave(relayId, held);
  }
  async claim(leases: readonly BucketLease[], options: ClaimOptions) {
    if (this.gate) await this.gate;
    const t = performance.now();
    const events = await this.inner.claim(leases, options);
    if (this.claimedAt) {
      const end = performance.now();
      for (const e of events) this.claimedAt.set(e.id, [performance.timeOrigin + t, performance.timeOrigin + end]);
    }
    if (events.length === 0) this.emptyClaims++;
    else this.claims.push(performance.now() - t);
    return events;
  }
  async complete(relayId: string, completions: readonly Completion[]) {
    const t = performance.now();
    const r = this.experiment && completions.every((c) => c.outcome === 'published')
      ? await this.#experimentalComplete(relayId, completions)
      : await this.inner.complete(relayId, completions);
    this.completeMs += performance.now() - t;
    this.completes++;
    return r;
  }
  async #experimentalComplete(relayId: string, completions: readonly Completion[]) {
    const { rows } = await this.experiment!.db.query<{ applied: number }>(this.experiment!.sql, [
      relayId,
      completions.map((c) => c.seq),
      completions.map((c) => c.token),
    ]);
    const applied = rows[0]!.applied;
    return { applied, rejected: completions.length - applied };
  }
  waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number, buckets?: readonly number[]) {
    return this.inner.waitForEvents(timeoutMs, signal, since, buckets);
  }
  wakeups(buckets?: readonly number[]) {
    return this.inner.wakeups?.(buckets) ?? 0;
  }
  close() {
    return this.inner.close();
  }
}

async function makeTransport(config: RelayWorkerConfig): Promise<Transport> {
  if (config.transport.kind === 'noop') return new NoopTransport();
  if (config.transport.kind === 'broker') return brokerTransport(config.transport.spec);
  if (config.transport.kind === 'http-node') return new NodeHttpBenchTransport({ endpoints: { orders: config.transport.url }, timeoutMs: 10_000, allowUnsigned: true, ...(process.env.BENCH_HTTP_MAX_SOCKETS ? { maxSockets: Number(process.env.BENCH_HTTP_MAX_SOCKETS) } : {}) });
  return new HttpTransport({ endpoints: { orders: config.transport.url }, timeoutMs: 10_000, allowUnsigned: true, ...(process.env.BENCH_HTTP_MAX_SOCKETS ? { maxSockets: Number(process.env.BENCH_HTTP_MAX_SOCKETS) } : {}) });
}

function send(message: RelayWorkerMessage): void {
  process.send?.(message);
}

async function main(): Promise<void> {
  const config = JSON.parse(process.env.BENCH_RELAY_WORKER ?? '{}') as RelayWorkerConfig;
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: config.lanes + 2 });
  const inner = new PostgresRelayStore({ schema: config.schema, connection, deleteOnPublish: config.deleteOnPublish, wake: config.wake ?? 'notify' });
  const store =
    config.complete === 'any-array'
      ? new TimedRelayStore(inner, { sql: anyArrayComplete(config.schema, config.deleteOnPublish), db: connection })
      : new TimedRelayStore(inner);
  const published = new Map<string, number>();
  const transport = config.trace ? recordAcks(await makeTransport(config), published, () => performance.timeOrigin + performance.now()) : await makeTransport(config);
  if (config.trace) store.claimedAt = new Map();
  let openGate: () => void = () => {};
  if (config.gated) store.gate = new Promise<void>((resolve) => (openGate = resolve));
  const metrics = metricsSetup(config.metrics ?? 'default');
  const relay = createRelay({
    store,
    transport,
    ...(metrics.metrics === undefined ? {} : { metrics: metrics.metrics }),
    batchSize: config.batchSize,
    lanes: config.lanes,
    // With deleteOnPublish there is nothing to prune; keep rows: the default retention (1 day) never fires in a benchmark.
    ...(config.deleteOnPublish ? { retention: false as const } : {}),
    ...(config.pollIntervalMs === undefined ? {} : { pollIntervalMs: config.pollIntervalMs }),
    ...(config.leaseTtlMs === undefined ? {} : { leaseTtlMs: config.leaseTtlMs }),
  });
  if (config.progress) relay.on('leases', (e) => send({ type: 'leases', held: e.held }));
  const errors: string[] = [];
  const errorCounts: Record<string, number> = {};
  let fenced = 0;
  let deadlocks = 0;
  relay.on('error', (e) => {
    if (/deadlock/i.test(e.error.message)) deadlocks++;
    const what = `${e.phase}: ${e.error.message}`;
    errorCounts[what] = (errorCounts[what] ?? 0) + 1;
  });
  relay.on('fenced', (e) => (fenced += e.rejected));
  if (process.env.BENCH_RELAY_DEBUG === '1') relay.on('leases', (e) => console.log(`relay leases: ${JSON.stringify(e)} at ${Math.round(performance.now())} ms`));
  relay.on('retry', (e) => {
    const what = `retry: ${e.error.slice(0, 120)}`;
    errorCounts[what] = (errorCounts[what] ?? 0) + 1;
  });
  let publishedCount = 0;
  let batches = 0;
  let doneAt: number | undefined;
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const rssBaseline = process.memoryUsage().rss;
  const memory = new MemorySampler(100);
  const started = performance.now();
  const cpuStart = process.cpuUsage();
  const closeWindow = openCpuWindow();
  let cpuMs: number | undefined;
  let cpuWindow: CpuWindow | undefined;
  relay.on('batch', (b) => {
    publishedCount += b.published;
    batches++;
    if (config.progress) send({ type: 'progress', published: publishedCount });
    if (config.expect !== undefined && doneAt === undefined && publishedCount >= config.expect) {
      doneAt = performance.now();
      const cpu = process.cpuUsage(cpuStart);
      cpuMs = (cpu.user + cpu.system) / 1000;
      cpuWindow = closeWindow();
      finish();
    }
  });
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'go') openGate();
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
  await metrics.stop();
  await connection.close();
  const claims = store.claims;
  const tenth = Math.max(1, Math.floor(claims.length / 10));
  const avg = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const result: RelayWorkerResult = {
    published: publishedCount,
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
    errors: Object.entries(errorCounts).map(([what, n]) => `${what} (x${n})`),
    fenced,
    deadlocks,
    ...(cpuMs === undefined ? {} : { cpuMs }),
    ...(cpuWindow === undefined ? {} : { cpuWindow }),
    ...(store.claimedAt
      ? { trace: [...store.claimedAt].map(([id, [sent, returned]]) => [id, sent, returned, published.get(id) ?? Number.NaN] as const) }
      : {}),
  };
  // Disconnect only once the (possibly large, with a trace) message has been written.
  await new Promise<void>((resolve) => (process.send ? process.send({ type: 'result', result } satisfies RelayWorkerMessage, undefined, {}, () => resolve()) : resolve()));
  process.disconnect?.();
  // The process should now exit by itself; if something still holds it open, say what, then leave.
  setTimeout(() => {
    const handles = (process as unknown as { _getActiveHandles(): object[] })._getActiveHandles().map((h) => h.constructor.name);
    console.error(`relay worker: still running 5 s after relay.stop() and pool close; open handles: ${handles.join(', ')}`);
    process.exit(3);
  }, 5000).unref();
}

main().catch((err: Error) => {
  send({ type: 'error', message: err.stack ?? err.message });
  process.exitCode = 1;
});
