/**
 * Commit-to-ack latency, shared by bench/latency.ts (no-op transport) and
 * bench/http-latency.ts (HTTP to a node:http receiver). Producer, relay and
 * receiver run in this one process, so both timestamps come from one clock:
 * commit time is taken when COMMIT has returned to the producer, ack time when
 * the transport was handed the event (no-op) or the receiver got the request (HTTP).
 */
import pg from 'pg';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ReceiverMessage } from './receiver-process.ts';
import { createRelay, type Metrics, type Transport } from 'txbox';
import { HttpTransport } from 'txbox/http';
import { pgConnection, PostgresRelayStore } from 'txbox/postgres';
import { startRelayWorker, type RelayWorker, type RelayWorkerResult } from './relay-process.ts';
import type { StageTrace } from './wal-stages.ts';
import type { ProducerConfig, ProducerMessage } from './producer-process.ts';
import { benchOutbox, DATABASE_URL, envInt, NoopTransport, orderEvent, percentile, resetOutbox, settle, type Bench } from './lib.ts';

export interface LatencyOptions {
  readonly rate: number;
  readonly seconds: number;
  /** Producer connections (single-event transactions, paced to `rate` in total). */
  readonly clients: number;
  readonly keys: number;
  /** Events per producer transaction (default 1); `rate` counts events. */
  readonly eventsPerTx?: number;
  readonly notify: boolean;
  readonly pollIntervalMs: number;
  /** The relay store's wake mode (default notify); `wal` also creates the bench schema's publication. */
  readonly wake?: 'notify' | 'wal';
  readonly transport: 'noop' | 'http';
  readonly batchSize?: number;
  readonly lanes?: number;
  /**
   * HTTP only: run the relay in a child process, as `txbox relay` runs in
   * production, so that it does not share an event loop with the producers
   * and the receiver. Both timestamps are still taken in this process.
   */
  readonly relayInChild?: boolean;
  /**
   * HTTP only: run the receiver in a process of its own, as the downstream
   * service would be, so that the producers' event loop does not delay it.
   * Timestamps are then wall-clock (`performance.timeOrigin + performance.now()`) in both processes.
   */
  readonly receiverInChild?: boolean;
  /**
   * Run the producers in a process of their own (bench/producer-process.ts), as the application would
   * be, so that the relay does not share its event loop with them; commit times come back on the wall clock.
   */
  readonly producersInChild?: boolean;
  /** In-process relay only: the relay store's `synchronousMarks` (undefined: the default, asynchronous marks). */
  readonly synchronousMarks?: boolean;
  /** In-process relay only: its `metrics` option (undefined: the default). */
  readonly metrics?: Metrics | false;
  /** In-process relay, no-op transport only: time each stage (bench/wal-stages.ts). */
  readonly stages?: StageTrace;
  /**
   * Seconds of commits before the measured `seconds` (default 0): produced and published as the
   * rest, reported apart (`warmup`) and left out of p50/p90/p99/max, which then describe a relay
   * that has run for a while (see warmupSeconds()).
   */
  readonly warmupSeconds?: number;
}

/** The first second of a run, reported apart: p50/p99/max over its events. */
export interface WarmupFigures {
  readonly events: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

/**
 * BENCH_WARMUP_SECONDS (default 1; 0 measures from the first commit): the seconds of each latency
 * run whose commits are reported apart. In the first second after a relay (and the producers'
 * connections) start, every stage is slower, the ceilings' included: on 30 Nov 2026 the events
 * committed in the first 0.6 s of a 10 s run at 1,000/s were 43-74 of its 100 slowest.
 */
export function warmupSeconds(): number {
  return envInt('BENCH_WARMUP_SECONDS', 1, 0);
}

/**
 * Latencies split at `warmupMs` after the first commit: those of the events committed later (the
 * steady state) and of those before, each sorted. `pairs`: [commit time, latency] in ms.
 */
export function splitWarmup(pairs: Iterable<readonly [number, number]>, warmupMs: number): { steady: number[]; warmup: number[]; steadyFrom: number } {
  const all = [...pairs];
  let first = Number.POSITIVE_INFINITY;
  for (const [t] of all) if (t < first) first = t;
  const steady: number[] = [];
  const warmup: number[] = [];
  for (const [t, latency] of all) (t - first < warmupMs ? warmup : steady).push(latency);
  const up = (a: number, b: number): number => a - b;
  return { steady: steady.sort(up), warmup: warmup.sort(up), steadyFrom: first + warmupMs };
}

/** p50/p99/max of sorted warm-up latencies. */
export function warmupFigures(sorted: readonly number[]): WarmupFigures {
  return { events: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] ?? Number.NaN };
}

export interface LatencyResult {
  readonly produced: number;
  readonly acked: number;
  readonly achievedRate: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
  /** Event-loop delay of this process (producer, relay and receiver share it): p99 and max, ms. */
  readonly loopDelayP99: number;
  readonly loopDelayMax: number;
  /**
   * This process's CPU (user + system) from the first commit to the last ack, per event: with the
   * relay in this process and the producers and receiver in children, the relay's (and the timing's).
   */
  readonly cpuUsPerEvent: number;
  readonly batches: number;
  /** The events of the first `warmupSeconds` (none when it is 0). */
  readonly warmup: WarmupFigures;
}

/** A receiver answering 204 to every request; `onRequest` gets the `webhook-id` as soon as the request arrives. */
async function startReceiver(onRequest: (id: string) => void): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const id = req.headers['webhook-id'];
    if (typeof id === 'string') onRequest(id);
    req.resume();
    req.on('end', () => {
      res.statusCode = 204;
      res.end();
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/orders`, server };
}

const RECEIVER = fileURLToPath(new URL('./receiver-process.ts', import.meta.url));

/** bench/receiver-process.ts in a child process; resolves once it listens. */
async function startReceiverProcess(): Promise<{ url: string; server: null; child: ChildProcess }> {
  const child = fork(RECEIVER, [], { execArgv: ['--conditions=txbox-source', '--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: ReceiverMessage) => (m.type === 'listening' ? resolve(m.url) : reject(new Error(`receiver said ${m.type}`))));
    child.once('exit', (code) => reject(new Error(`receiver exited with ${String(code)}`)));
  });
  return { url, server: null, child };
}

/** One request/answer over the child's IPC channel. */
function ask<T>(child: ChildProcess, type: 'count' | 'acks'): Promise<T> {
  return new Promise<T>((resolve) => {
    child.once('message', (m: ReceiverMessage) => resolve(m as T));
    child.send({ type });
  });
}

export async function measureCommitToAck(bench: Bench, o: LatencyOptions): Promise<LatencyResult> {
  await resetOutbox(bench);
  await settle(bench);
  const committedAt = new Map<string, number>();
  const ackedAt = new Map<string, number>();
  // Wall clock with sub-ms precision: comparable with the receiver process's timestamps.
  const now = (): number => performance.timeOrigin + performance.now();
  const ack = (id: string): void => {
    if (!ackedAt.has(id)) ackedAt.set(id, now());
  };
  let receiver: { url: string; server: Server | null; child?: ChildProcess } | undefined;
  let transport: Transport;
  if (o.transport === 'http') {
    receiver = o.receiverInChild ? await startReceiverProcess() : await startReceiver(ack);
    transport = new HttpTransport({ endpoints: { orders: receiver.url }, timeoutMs: 10_000, allowUnsigned: true });
  } else {
    transport = new NoopTransport((events) => {
      for (const e of events) ack(e.id);
      o.stages?.onPublish(events);
    });
  }
  let relay: { stop(): Promise<unknown> };
  let batches = 0;
  let trace: RelayWorkerResult['trace'];
  if (o.relayInChild && receiver) {
    const worker: RelayWorker = startRelayWorker({
      schema: bench.schema,
      batchSize: o.batchSize ?? 500,
      lanes: o.lanes ?? 2,
      deleteOnPublish: false,
      pollIntervalMs: o.pollIntervalMs,
      ...(o.wake ? { wake: o.wake } : {}),
      transport: { kind: 'http', url: receiver.url },
      ...(process.env.BENCH_TRACE === '1' ? { trace: true } : {}),
    });
    await worker.started;
    relay = {
      stop: async () => {
        const r = await worker.stop();
        batches = r.batches;
        if (r.trace) trace = r.trace;
        if (r.errors.length > 0 || r.fenced > 0) console.log(`relay errors: ${r.errors.join(" | ") || "none"}; fenced ${r.fenced}`);
        if (process.env.BENCH_RELAY_DEBUG === '1') {
          console.log(`relay: ${r.claims} claims with events (avg ${(r.claimMs / Math.max(1, r.claims)).toFixed(2)} ms, first tenth ${r.claimMsFirstTenth.toFixed(2)}, last tenth ${r.claimMsLastTenth.toFixed(2)}), ${r.emptyClaims} empty, ${r.completes} completes (avg ${(r.completeMs / Math.max(1, r.completes)).toFixed(2)} ms)`);
        }
      },
    };
  } else {
    const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: (o.lanes ?? 2) + 2 });
    const store = new PostgresRelayStore({
      schema: bench.schema,
      connection,
      wake: o.wake ?? 'notify',
      ...(o.synchronousMarks === undefined ? {} : { synchronousMarks: o.synchronousMarks }),
      ...(o.stages ? { walTrace: o.stages.onWalCommit } : {}),
    });
    if (o.stages) o.stages.committedAt = committedAt;
    const inProcess = createRelay({
      store: o.stages ? o.stages.wrap(store) : store,
      transport,
      pollIntervalMs: o.pollIntervalMs,
      ...(o.batchSize === undefined ? {} : { batchSize: o.batchSize }),
      ...(o.lanes === undefined ? {} : { lanes: o.lanes }),
      ...(o.metrics === undefined ? {} : { metrics: o.metrics }),
    });
    inProcess.on('batch', () => batches++);
    await inProcess.start();
    // WAL mode: measure from the moment the slot streams (its creation is a start cost, not a wake-up).
    while (o.wake === 'wal' && (await store.wakeStatus()).mode !== 'wal') await sleep(20);
    relay = { stop: async () => { await inProcess.stop(); await connection.close(); } };
  }
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const cpuAtStart = process.cpuUsage();
  const perTx = o.eventsPerTx ?? 1;
  const seconds = o.seconds + (o.warmupSeconds ?? 0);
  const total = o.rate * seconds;
  const transactions = Math.ceil(total / perTx);
  if (o.producersInChild) {
    const { commits, ms } = await produceInChild({ schema: bench.schema, rate: o.rate, seconds, clients: o.clients, keys: o.keys, perTx, notify: o.notify });
    for (const [id, t] of commits) committedAt.set(id, t);
    return finish(ms);
  }
  const outbox = benchOutbox(bench, o.notify);
  const clients = await Promise.all(
    Array.from({ length: o.clients }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
  const interval = (1000 * perTx) / o.rate;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const t = next++;
        if (t >= transactions) return;
        const due = started + t * interval;
        const wait = due - performance.now();
        if (wait > 1) await sleep(wait);
        const events = Array.from({ length: perTx }, (_, j) => orderEvent(t * perTx + j, (t * perTx + j) % o.keys));
        await c.query('BEGIN');
        const ids = await outbox.enqueue(c, events);
        await c.query('COMMIT');
        const at = now();
        for (const id of ids) committedAt.set(id, at);
      }
    }),
  );
  await Promise.all(clients.map((c) => c.end()));
  return finish(performance.now() - started);

  async function finish(produceMs: number): Promise<LatencyResult> {
    loop.disable();
    const deadline = performance.now() + 30_000;
    const child = receiver?.child;
    if (child) {
      while ((await ask<{ count: number }>(child, 'count')).count < committedAt.size && performance.now() < deadline) await sleep(100);
      for (const [id, t] of (await ask<{ acks: [string, number][] }>(child, 'acks')).acks) ackedAt.set(id, t);
      child.send({ type: 'close' });
    }
    // Every event committed (producers that fell behind stop early: fewer than transactions * perTx).
    while (ackedAt.size < committedAt.size && performance.now() < deadline) await sleep(20);
    const cpu = process.cpuUsage(cpuAtStart);
    await relay.stop();
    const server = receiver?.server;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    const pairs: [number, number][] = [];
    for (const [id, t] of committedAt) {
      const a = ackedAt.get(id);
      if (a !== undefined) pairs.push([t, a - t]);
    }
    const { steady: latencies, warmup, steadyFrom } = splitWarmup(pairs, (o.warmupSeconds ?? 0) * 1000);
    if (o.stages) o.stages.steadyFrom = steadyFrom;
    if (trace) printBreakdown(trace, committedAt, ackedAt);
    return {
      produced: committedAt.size,
      acked: pairs.length,
      achievedRate: (committedAt.size * 1000) / produceMs,
      p50: percentile(latencies, 50),
      p90: percentile(latencies, 90),
      p99: percentile(latencies, 99),
      max: latencies[latencies.length - 1] ?? Number.NaN,
      mean: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
      loopDelayP99: loop.percentile(99) / 1e6,
      loopDelayMax: loop.max / 1e6,
      cpuUsPerEvent: (cpu.user + cpu.system) / Math.max(1, committedAt.size),
      batches,
      warmup: warmupFigures(warmup),
    };
  }
}

/** Runs bench/producer-process.ts and returns each event's commit time (wall clock). */
export async function produceInChild(config: ProducerConfig): Promise<{ commits: readonly (readonly [string, number])[]; ms: number }> {
  const child = fork(fileURLToPath(new URL('./producer-process.ts', import.meta.url)), [], {
    execArgv: ['--conditions=txbox-source', '--import', 'tsx'],
    env: { ...process.env, BENCH_PRODUCER: JSON.stringify(config) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  try {
    return await new Promise((resolve, reject) => {
      child.on('message', (m: ProducerMessage) => {
        if (m.type === 'ready') child.send({ type: 'go' });
        else resolve({ commits: m.commits, ms: m.ms });
      });
      child.once('exit', (code) => reject(new Error(`the producer process exited with ${String(code)}`)));
    });
  } finally {
    child.kill();
  }
}

export const fmtMs = (ms: number): string => (Number.isFinite(ms) ? ms.toFixed(1) : '-');

/**
 * BENCH_TRACE=1: where the time went, per event: commit to claim sent (waiting
 * for a lane: notification, poll, or a lane busy with an earlier batch), the
 * claim query, claim returned to the receiver's timestamp (HTTP), and
 * received to publish resolved. p50/p99 of each step over all events, and the
 * mean of each step over the slowest 1%.
 */
function printBreakdown(trace: NonNullable<RelayWorkerResult['trace']>, committedAt: Map<string, number>, ackedAt: Map<string, number>): void {
  const steps = ['commit->claim sent', 'claim query', 'claim->received', 'received->publish resolved'] as const;
  const rows: { total: number; parts: number[] }[] = [];
  for (const [id, sent, returned, resolved] of trace) {
    const c = committedAt.get(id);
    const a = ackedAt.get(id);
    if (c === undefined || a === undefined) continue;
    rows.push({ total: a - c, parts: [sent - c, returned - sent, a - returned, resolved - a] });
  }
  rows.sort((x, y) => x.total - y.total);
  const slow = rows.slice(Math.floor(rows.length * 0.99));
  for (let i = 0; i < steps.length; i++) {
    const xs = rows.map((r) => r.parts[i]!).sort((a, b) => a - b);
    const slowMean = slow.reduce((a, r) => a + r.parts[i]!, 0) / Math.max(1, slow.length);
    console.log(`  ${steps[i]!.padEnd(28)} p50 ${fmtMs(percentile(xs, 50))} ms  p99 ${fmtMs(percentile(xs, 99))} ms  mean over slowest 1%: ${fmtMs(slowMean)} ms`);
  }
}
