/**
 * txbox next to a peer, graphile-worker used as an outbox (the job added with
 * `add_job` in the producer's transaction, a task that publishes the event),
 * side by side in ONE run, rounds alternated:
 *
 * - drain: a backlog of BENCH_PEER_NOOP_EVENTS (50000) events to a no-op sink,
 *   BENCH_PEER_HTTP_EVENTS (20000) to an HTTP receiver (a child process
 *   answering 204), BENCH_PEER_NATS_EVENTS (20000) to NATS JetStream (ack
 *   awaited, a fresh file stream per run). txbox's relay and graphile-worker
 *   each run in a child process and publish through the same txbox
 *   transport; graphile-worker one event per job, txbox in batches.
 * - latency: commit-to-publish p50/p99 at BENCH_RATES (500,1000) events/s,
 *   one event per transaction from 8 paced connections, LISTEN/NOTIFY, no-op
 *   sink, relay or worker in this process (one clock); BENCH_LATENCY_SECONDS
 *   measured after BENCH_WARMUP_SECONDS (1) of the same commits, whose
 *   figures are logged apart (0: none).
 * - producer: transactions/s of BENCH_CLIENTS (4) writers, each transaction
 *   one event (txbox enqueue, notify on as by default; graphile-worker add_job).
 *
 *   node --conditions=txbox-source --import tsx bench/peer-graphile-worker.ts
 *
 * graphile-worker runs in its own schema (bench_gw_<random>, dropped at the
 * end) tuned per its performance docs: BENCH_GW_CONCURRENCY (32) concurrent
 * jobs, localQueue size BENCH_GW_LOCAL_QUEUE (500; 1 turns it off),
 * completeJobBatchDelay BENCH_GW_COMPLETE_DELAY (0; -1 off), pool
 * BENCH_GW_POOL (34), prepared statements, useNodeTime. It runs jobs in any
 * order; txbox keeps per-key order (graphile-worker's named queues would, at
 * a cost not measured here).
 *
 * Each drain also reports CPU per event (µs): the relay's or the worker's
 * process, the HTTP receiver's, PostgreSQL's (every `postgres` process,
 * exited backends included through the postmaster's children time) and the
 * whole machine's, with the share of the run it was idle (from /proc/stat): a
 * drain that leaves the cores idle waits on round trips, not on CPU. Figures
 * from other work on the machine land in the PostgreSQL and machine columns.
 *
 * Targets (issue 16): HTTP and NATS drains at least 2x graphile-worker's in
 * the same run; the table prints each next to the ratio, with the ceilings of
 * the same round: the transport alone (in this process, and in a fresh one),
 * and for every drain the bare outbox (bench/bare-outbox-process.ts: the
 * store's claim statement, the publish and a bare UPDATE in a plain loop, none
 * of the relay's logic), which is what txbox's relay would reach if its
 * logic cost nothing.
 *
 * Settings: BENCH_ROUNDS (3), BENCH_PARTS (drain,latency,producer), BENCH_PEER_SINKS (noop,http,nats: which drains),
 * BENCH_PEER_WAKES (notify,wal: txbox's wake modes in the latency part, each beside graphile-worker's run of the same round),
 * BENCH_LATENCY_SECONDS (10), BENCH_SECONDS (10, producer, per system and round), BENCH_KEYS (1000),
 * BENCH_PEER_ALONE_REPEAT (1: the cold ceiling's process drains that many times and logs each drain's CPU per event).
 */
import pg from 'pg';
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { run, runMigrations } from 'graphile-worker';
import type { OutboxEvent } from 'txbox';
import { Backlog, benchOutbox, DATABASE_URL, envInt, envList, fmtInt, log, machine, mb, median, orderEvent, orderPayload, percentile, perSec, printTable, resetOutbox, settle, summary, timePublishCalls, withBench, type Bench } from './lib.ts';
import { startRelayWorker, type RelayWorkerConfig } from './relay-process.ts';
import { fmtMs, measureCommitToAck, splitWarmup, warmupFigures, warmupSeconds, type WarmupFigures } from './commit-to-ack.ts';
import { NATS_SERVERS, sinkTransport, type BrokerSpec } from './broker-transports.ts';
import { graphileOptions, type EventJob, type GraphileWorkerConfig, type GraphileWorkerMessage } from './graphile-worker-process.ts';
import type { ReceiverMessage } from './receiver-process.ts';
import type { CpuWindow } from './cpu-window.ts';
import type { TransportAloneConfig, TransportAloneMessage } from './transport-alone-process.ts';
import type { BareOutboxConfig, BareOutboxMessage } from './bare-outbox-process.ts';

const NOOP_EVENTS = envInt('BENCH_PEER_NOOP_EVENTS', 50_000);
const HTTP_EVENTS = envInt('BENCH_PEER_HTTP_EVENTS', 20_000);
const NATS_EVENTS = envInt('BENCH_PEER_NATS_EVENTS', 20_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const KEYS = envInt('BENCH_KEYS', 1000);
const RATES = envList('BENCH_RATES', [500, 1000]);
const LATENCY_SECONDS = envInt('BENCH_LATENCY_SECONDS', 10);
/** BENCH_WARMUP_SECONDS (1): each latency run, txbox's and graphile-worker's alike, commits this long first; those events are reported apart. */
const WARMUP = warmupSeconds();
const PRODUCER_SECONDS = envInt('BENCH_SECONDS', 10);
const WRITERS = envInt('BENCH_CLIENTS', 4);
const PARTS = (process.env.BENCH_PARTS ?? 'drain,latency,producer').split(',').map((s) => s.trim());
const SINKS = (process.env.BENCH_PEER_SINKS ?? 'noop,http,nats').split(',').map((s) => s.trim());
/** txbox's wake modes in the latency part: notify (LISTEN/NOTIFY, producers notify) and wal (the WAL wake mode, producers without NOTIFY). */
const WAKES = (process.env.BENCH_PEER_WAKES ?? 'notify,wal').split(',').map((s) => s.trim()) as ('notify' | 'wal')[];
/** The ratio issue 16 asks of the HTTP and NATS drains. */
const TARGET = 2;
const signedInt = (name: string, fallback: number): number => (process.env[name] ? Number(process.env[name]) : fallback);
const GW = {
  concurrentJobs: envInt('BENCH_GW_CONCURRENCY', 32),
  localQueueSize: signedInt('BENCH_GW_LOCAL_QUEUE', 500),
  completeJobBatchDelay: signedInt('BENCH_GW_COMPLETE_DELAY', 0),
  maxPoolSize: envInt('BENCH_GW_POOL', 34),
};
const GW_WORKER = fileURLToPath(new URL('./graphile-worker-process.ts', import.meta.url));
const RECEIVER = fileURLToPath(new URL('./receiver-process.ts', import.meta.url));
const TSX = ['--conditions=txbox-source', '--import', 'tsx'];
const runId = randomBytes(3).toString('hex');

/** graphile-worker's schema for this run: migrated once, its jobs table refilled before each drain. */
class GraphileSchema {
  private constructor(
    readonly name: string,
    private readonly bench: Bench,
  ) {}

  static async create(bench: Bench): Promise<GraphileSchema> {
    const name = `bench_gw_${runId}`;
    await runMigrations(graphileOptions({ schema: name, ...GW }));
    return new GraphileSchema(name, bench);
  }

  /** Empties the jobs table and adds the first `n` events of txbox's backlog as jobs (the same envelopes), not timed. */
  async restore(n: number): Promise<void> {
    const s = `"${this.name}"`;
    await this.bench.sql(`TRUNCATE ${s}._private_jobs`);
    for (let offset = 0; offset < n; offset += 5000) {
      await this.bench.sql(
        `SELECT count(*) FROM ${s}.add_jobs(ARRAY(
           SELECT ROW('publish', json_build_object('id', id, 'type', type, 'aggregateType', aggregate_type, 'aggregateId', aggregate_id,
             'key', key, 'destination', destination, 'payload', payload, 'headers', headers, 'occurredAt', occurred_at, 'version', version),
             NULL, NULL, NULL, NULL, NULL, NULL)::${s}.job_spec
           FROM "${this.bench.schema}".backlog ORDER BY seq LIMIT $1 OFFSET $2))`,
        [Math.min(5000, n - offset), offset],
      );
    }
    await this.bench.sql(`VACUUM (ANALYZE) ${s}._private_jobs`);
    await this.bench.sql('CHECKPOINT');
  }

  async truncate(): Promise<void> {
    await this.bench.sql(`TRUNCATE "${this.name}"._private_jobs`);
  }

  async drop(): Promise<void> {
    await this.bench.sql(`DROP SCHEMA IF EXISTS "${this.name}" CASCADE`);
  }
}

type Sink = RelayWorkerConfig['transport'];

interface DrainResult {
  readonly rate: number;
  readonly rss: number;
  /** Events drained, and the drain's own process's CPU time over the timed part. */
  readonly n: number;
  readonly cpuMs: number;
  readonly window: CpuWindow | undefined;
}

async function txboxDrain(bench: Bench, backlog: Backlog, n: number, sink: Sink): Promise<DrainResult> {
  await backlog.restore(n);
  const r = await startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, expect: n, transport: sink }).result;
  if (r.errors.length > 0) log(`  txbox relay errors: ${r.errors.join(' | ')}`);
  return { rate: perSec(r.published, r.ms), rss: r.rssMax, n: r.published, cpuMs: r.cpuMs ?? Number.NaN, window: r.cpuWindow };
}

/**
 * Runs one of the benchmark's child processes (under tsx): sends it `config` if given, and resolves with
 * the one message it answers; rejects when that message is an error or the process exits first.
 */
async function childResult<M extends { readonly type: string }>(
  file: string,
  what: string,
  options: { readonly config?: unknown; readonly env?: NodeJS.ProcessEnv },
): Promise<Exclude<M, { readonly type: 'error' }>> {
  const child = fork(file, [], { execArgv: TSX, ...(options.env === undefined ? {} : { env: options.env }), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  if (options.config !== undefined) child.send(options.config as object);
  const m = await new Promise<M>((resolve, reject) => {
    child.once('message', (message) => resolve(message as M));
    child.once('exit', (code) => reject(new Error(`${what} process exited with ${String(code)} before reporting`)));
  });
  if (m.type === 'error') throw new Error(`${what} process failed: ${(m as unknown as { message: string }).message}`);
  return m as Exclude<M, { readonly type: 'error' }>;
}

async function graphileDrain(gw: GraphileSchema, n: number, sink: Sink): Promise<DrainResult> {
  await gw.restore(n);
  const config: GraphileWorkerConfig = { schema: gw.name, expect: n, transport: sink, ...GW };
  const m = await childResult<GraphileWorkerMessage>(GW_WORKER, 'graphile-worker', { env: { ...process.env, BENCH_GW_WORKER: JSON.stringify(config) } });
  if (m.result.failed > 0) log(`  graphile-worker: ${m.result.failed} failed jobs (retried)`);
  return { rate: perSec(m.result.completed, m.result.ms), rss: m.result.rssMax, n: m.result.completed, cpuMs: m.result.cpuMs, window: m.result.cpuWindow };
}

/**
 * The ceiling of any outbox that publishes one event per request through this
 * transport: the same number of events published straight through it from
 * this (warm) process, in calls of 500 over the same keys, no database at all.
 * A relay does this work and more; so txbox / graphile-worker can exceed
 * raw / graphile-worker only by graphile-worker being slower than its own share.
 */
async function rawTransportRate(n: number, sink: Sink): Promise<number> {
  return (await timePublishCalls(await sinkTransport(sink), { events: n, batch: 500, keys: KEYS, payload: orderPayload(1, 1) })).rate;
}

/** BENCH_PEER_ALONE_REPEAT (1): drains the cold ceiling's process runs back to back; above 1 the log shows each one's CPU per event (the warm-up). */
const ALONE_REPEAT = envInt('BENCH_PEER_ALONE_REPEAT', 1);
const ALONE_WORKER = fileURLToPath(new URL('./transport-alone-process.ts', import.meta.url));

/**
 * The cold ceiling: the same transport, `n` events, two calls of 500 at a time, no database, in a fresh
 * process (bench/transport-alone-process.ts), as each drain's relay and worker start fresh. Events/s and
 * the process's CPU per event (µs).
 */
async function coldTransportRate(n: number, sink: Sink): Promise<{ rate: number; cpuUs: number; cpuUsPerDrain: number[] }> {
  const m = await childResult<TransportAloneMessage>(ALONE_WORKER, 'transport-alone', { config: { sink, n, keys: KEYS, repeat: ALONE_REPEAT } satisfies TransportAloneConfig });
  return { rate: m.rate, cpuUs: (m.cpuMs * 1000) / n, cpuUsPerDrain: m.cpuMsPerDrain.map((ms) => (ms * 1000) / n) };
}

const BARE_WORKER = fileURLToPath(new URL('./bare-outbox-process.ts', import.meta.url));

/**
 * The outbox ceiling: the bare outbox (bench/bare-outbox-process.ts) drains the same backlog in a fresh
 * process, two loops (half of the buckets each) of the store's claim, the publish and an UPDATE of the
 * acked rows per 500 events, with the same transport and the relay's reading of rows, none of the relay's
 * logic: what txbox's relay would reach if its logic cost nothing, with its CPU split.
 */
async function bareOutboxDrain(bench: Bench, backlog: Backlog, n: number, sink: Sink): Promise<DrainResult> {
  await backlog.restore(n);
  const m = await childResult<BareOutboxMessage>(BARE_WORKER, 'bare outbox', { config: { sink, schema: bench.schema, expect: n, lanes: 2, batch: 500 } satisfies BareOutboxConfig });
  if (m.unacked > 0) log(`  bare outbox: ${m.unacked} events not acked (left pending, claimed again)`);
  return { rate: perSec(m.published, m.ms), rss: m.rssMax, n: m.published, cpuMs: m.cpuMs, window: m.cpuWindow };
}

interface CpuPerEvent {
  readonly own: number;
  readonly receiver: number;
  readonly postgres: number;
  readonly machine: number;
  /** Share of the machine's CPU time left idle during the drain. */
  readonly idle: number;
}

/**
 * Runs one drain and splits the CPU it took per event: the drain's process,
 * PostgreSQL and the machine over its timed part (measured by the child), the
 * receiver from before to after (it does nothing else meanwhile).
 */
async function measuredDrain(receiver: Receiver | null, drain: () => Promise<DrainResult>): Promise<DrainResult & { cpu: CpuPerEvent }> {
  const before = receiver ? await receiver.cpuUs() : 0;
  const r = await drain();
  const after = receiver ? await receiver.cpuUs() : 0;
  const us = (ms: number): number => (ms * 1000) / Math.max(1, r.n);
  const w = r.window;
  return {
    ...r,
    cpu: {
      own: us(r.cpuMs),
      receiver: (after - before) / Math.max(1, r.n),
      postgres: w ? us(w.postgresMs) : Number.NaN,
      machine: w ? us(w.machineBusyMs) : Number.NaN,
      idle: w && w.machineTotalMs > 0 ? 1 - w.machineBusyMs / w.machineTotalMs : Number.NaN,
    },
  };
}

const fmtCpu = (c: CpuPerEvent): string =>
  `CPU per event: own ${fmtInt(c.own)} µs, receiver ${fmtInt(c.receiver)} µs, postgres ${fmtInt(c.postgres)} µs, machine ${fmtInt(c.machine)} µs (idle ${(c.idle * 100).toFixed(0)}%)`;

/** A fresh JetStream file stream per run, so that no run's publishes are deduplicated against another's. */
async function natsStreams(): Promise<{ fresh(): Promise<BrokerSpec>; close(): Promise<void> }> {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstreamManager, StorageType } = await import('@nats-io/jetstream');
  const nc = await connect({ servers: NATS_SERVERS });
  const jsm = await jetstreamManager(nc);
  const made: string[] = [];
  return {
    async fresh() {
      const stream = `BENCH_PEER_${runId}_${made.length + 1}`;
      const subject = `benchpeer.${runId}.${made.length + 1}.orders`;
      await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.File });
      made.push(stream);
      return { kind: 'nats', subject, stream };
    },
    async close() {
      for (const s of made) await jsm.streams.delete(s).catch(() => {});
      await nc.close();
    },
  };
}

interface Receiver {
  readonly url: string;
  /** The receiver process's CPU time so far, µs. */
  cpuUs(): Promise<number>;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const child: ChildProcess = fork(RECEIVER, [], { execArgv: TSX, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: ReceiverMessage) => (m.type === 'listening' ? resolve(m.url) : reject(new Error(`receiver said ${m.type}`))));
    child.once('exit', (code) => reject(new Error(`receiver exited with ${String(code)}`)));
  });
  return {
    url,
    cpuUs: () =>
      new Promise<number>((resolve) => {
        const on = (m: ReceiverMessage): void => {
          if (m.type !== 'cpu') return;
          child.off('message', on);
          resolve(m.us);
        };
        child.on('message', on);
        child.send({ type: 'cpu' });
      }),
    close: async () => {
      child.send({ type: 'close' });
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

function eventJob(e: ReturnType<typeof orderEvent>, id: string): EventJob {
  return {
    id,
    type: e.type,
    aggregateType: e.aggregateType,
    aggregateId: String(e.aggregateId),
    key: `${e.aggregateType}:${String(e.aggregateId)}`,
    destination: e.destination,
    payload: e.payload,
    headers: { ...e.headers },
    occurredAt: new Date().toISOString(),
    version: null,
  };
}

/** graphile-worker's commit-to-publish latency, measured as bench/commit-to-ack.ts measures txbox's. */
async function graphileLatency(gw: GraphileSchema, rate: number): Promise<{ p50: number; p99: number; acked: number; produced: number; warmup: WarmupFigures }> {
  await gw.truncate();
  const committedAt = new Map<string, number>();
  const ackedAt = new Map<string, number>();
  const now = (): number => performance.timeOrigin + performance.now();
  const runner = await run({
    ...graphileOptions({ schema: gw.name, ...GW }),
    taskList: {
      async publish(payload) {
        const id = (payload as EventJob).id;
        if (!ackedAt.has(id)) ackedAt.set(id, now());
      },
    },
  });
  const clients = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
  const addJob = `SELECT "${gw.name}".add_job('publish', $1::json)`;
  const total = rate * (LATENCY_SECONDS + WARMUP);
  const interval = 1000 / rate;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const t = next++;
        if (t >= total) return;
        const wait = started + t * interval - performance.now();
        if (wait > 1) await sleep(wait);
        const id = crypto.randomUUID();
        await c.query('BEGIN');
        await c.query(addJob, [JSON.stringify(eventJob(orderEvent(t, t % KEYS), id))]);
        await c.query('COMMIT');
        committedAt.set(id, now());
      }
    }),
  );
  const deadline = performance.now() + 30_000;
  while (ackedAt.size < total && performance.now() < deadline) await sleep(20);
  await runner.stop();
  await Promise.all(clients.map((c) => c.end()));
  const pairs = [...committedAt].map(([id, t]) => [t, (ackedAt.get(id) ?? Number.NaN) - t] as const).filter(([, x]) => !Number.isNaN(x));
  const { steady, warmup } = splitWarmup(pairs, WARMUP * 1000);
  return { p50: percentile(steady, 50), p99: percentile(steady, 99), acked: pairs.length, produced: committedAt.size, warmup: warmupFigures(warmup) };
}

/** WRITERS connections, one event per transaction, for PRODUCER_SECONDS: transactions per second. */
async function producer(bench: Bench, gw: GraphileSchema, system: 'txbox' | 'graphile-worker'): Promise<number> {
  await resetOutbox(bench);
  await gw.truncate();
  await settle(bench);
  const outbox = benchOutbox(bench, true);
  const addJob = `SELECT "${gw.name}".add_job('publish', $1::json)`;
  const clients = await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
  let count = 0;
  const deadline = performance.now() + PRODUCER_SECONDS * 1000;
  const started = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      while (performance.now() < deadline) {
        const i = count;
        const customer = i % KEYS;
        await c.query('BEGIN');
        if (system === 'txbox') await outbox.enqueue(c, orderEvent(i, customer));
        else await c.query(addJob, [JSON.stringify(eventJob(orderEvent(i, customer), crypto.randomUUID()))]);
        await c.query('COMMIT');
        count++;
      }
    }),
  );
  const ms = performance.now() - started;
  await Promise.all(clients.map((c) => c.end()));
  return perSec(count, ms);
}

interface Row {
  readonly what: string;
  readonly unit: string;
  readonly txbox: number[];
  readonly gw: number[];
  /** Lower is better (latency). */
  readonly lower?: boolean;
  /** The ratio asked for (issue 16), if any. */
  readonly target?: number;
  /** The transport alone, no database (rawTransportRate), per round: the ceiling of the ratio. */
  readonly raw: number[];
  /** The same in a fresh process (coldTransportRate), per round: the ceiling of a drain that starts its process. */
  readonly cold: number[];
  /** The bare outbox (bareOutboxDrain), per round: the ceiling of a one-process outbox in PostgreSQL. */
  readonly bare: number[];
}

await withBench('peer', async (bench) => {
  log(`${machine()}`);
  log(`txbox vs graphile-worker: ${ROUNDS} round(s), parts ${PARTS.join(', ')}, drains ${SINKS.join(', ')}; graphile-worker ${JSON.stringify(GW)}; txbox relay batch 500, lanes 2`);
  const gw = await GraphileSchema.create(bench);
  const rows: Row[] = [];
  const row = (what: string, unit: string, lower = false, target?: number): Row => {
    const r: Row = { what, unit, txbox: [], gw: [], raw: [], cold: [], bare: [], lower, ...(target === undefined ? {} : { target }) };
    rows.push(r);
    return r;
  };
  try {
    if (PARTS.includes('drain')) {
      const sizes = { noop: NOOP_EVENTS, http: HTTP_EVENTS, nats: NATS_EVENTS } as Record<string, number>;
      const backlog = await Backlog.create(bench, Math.max(...SINKS.map((s) => sizes[s] ?? 0)), KEYS);
      const receiver = await startReceiver();
      const nats = await natsStreams();
      try {
        const all: { name: string; row: () => Row; n: number; sink: () => Promise<Sink>; receiver: Receiver | null }[] = [
          { name: 'noop', row: () => row(`drain ${fmtInt(NOOP_EVENTS)} no-op`, 'events/s'), n: NOOP_EVENTS, sink: async () => ({ kind: 'noop' }), receiver: null },
          { name: 'http', row: () => row(`drain ${fmtInt(HTTP_EVENTS)} HTTP`, 'events/s', false, TARGET), n: HTTP_EVENTS, sink: async () => ({ kind: 'http', url: receiver.url }), receiver },
          { name: 'nats', row: () => row(`drain ${fmtInt(NATS_EVENTS)} NATS (ack awaited)`, 'events/s', false, TARGET), n: NATS_EVENTS, sink: async () => ({ kind: 'broker', spec: await nats.fresh() }), receiver: null },
        ];
        const sinks = all.filter((s) => SINKS.includes(s.name)).map((s) => ({ ...s, row: s.row() }));
        for (let round = 1; round <= ROUNDS; round++) {
          for (const s of sinks) {
            const order = round % 2 === 1 ? (['txbox', 'gw'] as const) : (['gw', 'txbox'] as const);
            for (const who of order) {
              const sink = await s.sink();
              const r = await measuredDrain(s.receiver, () => (who === 'txbox' ? txboxDrain(bench, backlog, s.n, sink) : graphileDrain(gw, s.n, sink)));
              (who === 'txbox' ? s.row.txbox : s.row.gw).push(r.rate);
              log(`round ${round} ${s.row.what}: ${who === 'txbox' ? 'txbox' : 'graphile-worker'} ${fmtInt(r.rate)} events/s, max RSS ${mb(r.rss)} MB; ${fmtCpu(r.cpu)}; ${machine()}`);
            }
            if (s.row.target !== undefined) {
              const rate = await rawTransportRate(s.n, await s.sink());
              s.row.raw.push(rate);
              log(`round ${round} ${s.row.what}: the transport alone, no database ${fmtInt(rate)} events/s (the ceiling); ${machine()}`);
              const cold = await coldTransportRate(s.n, await s.sink());
              s.row.cold.push(cold.rate);
              log(`round ${round} ${s.row.what}: the transport alone in a fresh process, no database ${fmtInt(cold.rate)} events/s, its CPU ${cold.cpuUs.toFixed(0)} µs per event (the cold ceiling)${cold.cpuUsPerDrain.length > 1 ? `; the same process's drains 1-${cold.cpuUsPerDrain.length}: ${cold.cpuUsPerDrain.map((us) => us.toFixed(1)).join(' / ')} µs per event` : ''}; ${machine()}`);
            }
            const bareSink = await s.sink();
            const bare = await measuredDrain(s.receiver, () => bareOutboxDrain(bench, backlog, s.n, bareSink));
            s.row.bare.push(bare.rate);
            log(`round ${round} ${s.row.what}: the bare outbox (the store's claim, publish, UPDATE; no relay logic) ${fmtInt(bare.rate)} events/s, max RSS ${mb(bare.rss)} MB; ${fmtCpu(bare.cpu)}; ${machine()}`);
          }
        }
      } finally {
        await nats.close();
        await receiver.close();
      }
    }
    if (PARTS.includes('latency')) {
      for (const rate of RATES) {
        // txbox in each wake mode (BENCH_PEER_WAKES), each against graphile-worker's run of the same round.
        const modes = WAKES.map((wake) => ({
          wake,
          p50: row(`latency @${fmtInt(rate)}/s p50${wake === 'wal' ? ', txbox WAL mode' : ''}`, 'ms', true),
          p99: row(`latency @${fmtInt(rate)}/s p99${wake === 'wal' ? ', txbox WAL mode' : ''}`, 'ms', true),
          warm: WARMUP > 0 ? row(`latency @${fmtInt(rate)}/s p99 of the first ${WARMUP} s${wake === 'wal' ? ', txbox WAL mode' : ''}`, 'ms', true) : undefined,
        }));
        for (let round = 1; round <= ROUNDS; round++) {
          const order = round % 2 === 1 ? [...WAKES, 'gw' as const] : ['gw' as const, ...WAKES];
          for (const who of order) {
            const r =
              who === 'gw'
                ? await graphileLatency(gw, rate)
                : await measureCommitToAck(bench, { rate, seconds: LATENCY_SECONDS, warmupSeconds: WARMUP, clients: 8, keys: KEYS, notify: who === 'notify', wake: who, pollIntervalMs: 1000, transport: 'noop' });
            for (const m of modes) {
              if (who === 'gw') {
                m.p50.gw.push(r.p50);
                m.p99.gw.push(r.p99);
                m.warm?.gw.push(r.warmup.p99);
              } else if (who === m.wake) {
                m.p50.txbox.push(r.p50);
                m.p99.txbox.push(r.p99);
                m.warm?.txbox.push(r.warmup.p99);
              }
            }
            log(`round ${round} latency @${rate}/s: ${who === 'gw' ? 'graphile-worker' : `txbox (${who})`} p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms (${fmtInt(r.acked)}/${fmtInt(r.produced)} acked)${WARMUP > 0 ? `; the first ${WARMUP} s, not counted: p50 ${fmtMs(r.warmup.p50)} ms, p99 ${fmtMs(r.warmup.p99)} ms, max ${fmtMs(r.warmup.max)} ms` : ''}`);
          }
        }
      }
    }
    if (PARTS.includes('producer')) {
      const p = row(`producer, ${WRITERS} writers, 1 event/tx`, 'tx/s');
      for (let round = 1; round <= ROUNDS; round++) {
        const order = round % 2 === 1 ? (['txbox', 'graphile-worker'] as const) : (['graphile-worker', 'txbox'] as const);
        for (const who of order) {
          const r = await producer(bench, gw, who);
          (who === 'txbox' ? p.txbox : p.gw).push(r);
          log(`round ${round} producer: ${who} ${fmtInt(r)} tx/s`);
        }
      }
    }
  } finally {
    await gw.drop();
  }
  const fmt = (r: Row, x: number): string => (r.unit === 'ms' ? x.toFixed(2) : fmtInt(x));
  // The ratio of runs next to each other in time (the same round), then the median: drift on a shared machine cancels out.
  const ratios = (r: Row): number[] => r.txbox.map((t, i) => t / r.gw[i]!);
  console.log(`\ntxbox and graphile-worker in one run, median of ${ROUNDS} round(s) (per round in parentheses); ratio = txbox / graphile-worker within each round:`);
  printTable(
    ['measure', 'unit', 'txbox', 'graphile-worker', 'ratio, median (per round)', 'target'],
    rows.map((r) => {
      const rs = ratios(r);
      return [
        r.what,
        r.unit,
        `${fmt(r, median(r.txbox))} (${r.txbox.map((x) => fmt(r, x)).join(' / ')})`,
        `${fmt(r, median(r.gw))} (${r.gw.map((x) => fmt(r, x)).join(' / ')})`,
        `${median(rs).toFixed(2)}x (${rs.map((x) => x.toFixed(2)).join(' / ')})`,
        r.target === undefined ? '' : `>= ${r.target.toFixed(2)}x: ${median(rs) >= r.target ? 'met' : 'NOT met'} (${rs.filter((x) => x >= r.target!).length}/${rs.length} rounds)`,
      ];
    }),
  );
  const ceilings = rows.filter((r) => r.raw.length > 0);
  if (ceilings.length > 0) {
    console.log('\nThe ceiling: the transport alone (no database, this warm process) against graphile-worker in the same round; no outbox that publishes through this transport exceeds it:');
    printTable(
      ['measure', 'transport alone', 'graphile-worker', 'transport alone / graphile-worker (per round)'],
      ceilings.map((r) => [r.what, r.raw.map((x) => fmtInt(x)).join(' / '), r.gw.map((x) => fmtInt(x)).join(' / '), r.raw.map((x, i) => `${(x / r.gw[i]!).toFixed(2)}x`).join(' / ')]),
    );
    console.log('\nThe cold ceiling: the transport alone in a fresh process (two calls at a time, no database), as each drain starts its process; txbox against it:');
    printTable(
      ['measure', 'transport alone, fresh process', 'its / graphile-worker (per round)', 'txbox / it (per round)'],
      ceilings.map((r) => [r.what, r.cold.map((x) => fmtInt(x)).join(' / '), r.cold.map((x, i) => `${(x / r.gw[i]!).toFixed(2)}x`).join(' / '), r.cold.map((x, i) => `${((r.txbox[i] ?? 0) / x).toFixed(2)}`).join(' / ')]),
    );
  }
  const bares = rows.filter((r) => r.bare.length > 0);
  if (bares.length > 0) {
    console.log("\nThe outbox ceiling: the bare outbox (the store's claim statement, the publish, an UPDATE of the acked rows per 500 events; two loops in a fresh process, half of the buckets each; none of the relay's logic) against graphile-worker and txbox in the same round:");
    printTable(
      ['measure', 'bare outbox', 'its / graphile-worker (per round)', 'txbox / it (per round)'],
      bares.map((r) => [r.what, r.bare.map((x) => fmtInt(x)).join(' / '), r.bare.map((x, i) => `${(x / r.gw[i]!).toFixed(2)}x`).join(' / '), r.bare.map((x, i) => `${((r.txbox[i] ?? 0) / x).toFixed(2)}`).join(' / ')]),
    );
  }
  for (const r of bares) summary('peer-graphile-worker', `${r.what}: the bare outbox ${fmtInt(median(r.bare))} events/s, ${(median(r.bare.map((x, i) => x / r.gw[i]!))).toFixed(2)}x graphile-worker (median per round): the outbox ceiling of the ratio; txbox reached ${(median(r.bare.map((x, i) => (r.txbox[i] ?? 0) / x)) * 100).toFixed(0)}% of it`);
  for (const r of ceilings) summary('peer-graphile-worker', `${r.what}: the transport alone in a fresh process ${fmtInt(median(r.cold))} events/s, ${(median(r.cold.map((x, i) => x / r.gw[i]!))).toFixed(2)}x graphile-worker (median per round): the cold ceiling of the ratio; txbox reached ${(median(r.cold.map((x, i) => (r.txbox[i] ?? 0) / x)) * 100).toFixed(0)}% of it`);
  for (const r of ceilings) summary('peer-graphile-worker', `${r.what}: the transport alone ${fmtInt(median(r.raw))} events/s, ${(median(r.raw.map((x, i) => x / r.gw[i]!))).toFixed(2)}x graphile-worker (median per round): the ceiling of the ratio`);
  for (const r of rows) {
    summary('peer-graphile-worker', `${r.what}: txbox ${fmt(r, median(r.txbox))} ${r.unit}, graphile-worker ${fmt(r, median(r.gw))} ${r.unit} (txbox / graphile-worker per round, median ${median(ratios(r)).toFixed(2)}x${r.lower ? ', lower is better' : ''}${r.target === undefined ? '' : `; target >= ${r.target.toFixed(2)}x ${median(ratios(r)) >= r.target ? 'met' : 'NOT met'}`})`);
  }
});
