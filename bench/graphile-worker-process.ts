/**
 * graphile-worker as an outbox relay, in a child process of
 * bench/peer-graphile-worker.ts (as bench/relay-worker.ts runs txbox's relay):
 * a `publish` task sends the job's event through the same txbox transport
 * the relay uses (no-op, HTTP or NATS), one event per job; a failed publish
 * throws, so graphile-worker retries it. Runs until `expect` jobs have
 * completed (written back to the database), reports and exits.
 *
 * Config: BENCH_GW_WORKER, JSON of GraphileWorkerConfig.
 */
import { EventEmitter, setMaxListeners } from 'node:events';
import { run, Logger, type Runner, type WorkerEvents } from 'graphile-worker';
import type { OutboxEvent, Transport } from 'txbox';
import { HttpTransport } from 'txbox/http';
import { brokerTransport } from './broker-transports.ts';
import { NodeHttpBenchTransport } from './node-http-transport.ts';
import { DATABASE_URL, NoopTransport } from './lib.ts';
import { openCpuWindow, type CpuWindow } from './cpu-window.ts';
import type { RelayWorkerConfig } from './relay-process.ts';

export interface GraphileWorkerConfig {
  readonly schema: string;
  readonly expect: number;
  readonly transport: RelayWorkerConfig['transport'];
  readonly concurrentJobs: number;
  /** graphile-worker's localQueue.size (-1: off). */
  readonly localQueueSize: number;
  /** graphile-worker's completeJobBatchDelay in ms (-1: off). */
  readonly completeJobBatchDelay: number;
  readonly maxPoolSize: number;
}

export type GraphileWorkerMessage =
  | { readonly type: 'result'; readonly result: { readonly completed: number; readonly failed: number; readonly ms: number; readonly rssMax: number; readonly cpuMs: number; readonly cpuWindow: CpuWindow } }
  | { readonly type: 'error'; readonly message: string };

/** The job payload: the event's envelope, as an outbox row holds it. */
export interface EventJob {
  readonly id: string;
  readonly type: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly key: string;
  readonly destination: string;
  readonly payload: unknown;
  readonly headers: Record<string, string>;
  readonly occurredAt: string;
  readonly version: number | null;
}

export function jobEvent(job: EventJob): OutboxEvent {
  return { ...job, occurredAt: new Date(job.occurredAt) };
}

async function makeTransport(t: GraphileWorkerConfig['transport']): Promise<Transport> {
  if (t.kind === 'noop') return new NoopTransport();
  if (t.kind === 'broker') return brokerTransport(t.spec);
  if (t.kind === 'http-node') return new NodeHttpBenchTransport({ endpoints: { orders: t.url }, timeoutMs: 10_000, allowUnsigned: true });
  return new HttpTransport({ endpoints: { orders: t.url }, timeoutMs: 10_000, allowUnsigned: true });
}

/** The options every graphile-worker of the benchmarks runs with (its docs' performance page: batching on, prepared statements, Node's clock). */
export function graphileOptions(c: Pick<GraphileWorkerConfig, 'schema' | 'concurrentJobs' | 'localQueueSize' | 'completeJobBatchDelay' | 'maxPoolSize'>) {
  return {
    connectionString: DATABASE_URL,
    schema: c.schema,
    concurrency: c.concurrentJobs,
    maxPoolSize: c.maxPoolSize,
    noHandleSignals: true,
    pollInterval: 1000,
    useNodeTime: true,
    noPreparedStatements: false,
    logger: new Logger(() => () => {}),
    preset: {
      worker: {
        ...(c.localQueueSize > 1 ? { localQueue: { size: c.localQueueSize } } : {}),
        completeJobBatchDelay: c.completeJobBatchDelay,
      },
    },
  } as const;
}

async function main(): Promise<void> {
  const config = JSON.parse(process.env.BENCH_GW_WORKER ?? '{}') as GraphileWorkerConfig;
  const transport = await makeTransport(config.transport);
  await transport.start?.(new AbortController().signal);
  const events: WorkerEvents = new EventEmitter() as WorkerEvents;
  let completed = 0;
  let failed = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  events.on('job:complete', ({ error }) => {
    if (error) failed++;
    else if (++completed === config.expect) done();
  });
  let rssMax = 0;
  const sampler = setInterval(() => (rssMax = Math.max(rssMax, process.memoryUsage().rss)), 100);
  const signal = new AbortController().signal;
  setMaxListeners(0, signal); // every concurrent job's publish listens on it
  const started = performance.now();
  const cpuStart = process.cpuUsage();
  const closeWindow = openCpuWindow();
  const runner: Runner = await run({
    ...graphileOptions(config),
    events,
    taskList: {
      async publish(payload) {
        const [outcome] = await transport.publish([jobEvent(payload as EventJob)], signal);
        if (!outcome?.ok) throw new Error(`publish failed: ${outcome && !outcome.ok ? outcome.error.message : 'no outcome'}`);
      },
    },
  });
  await finished;
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpuStart);
  const cpuWindow = closeWindow();
  clearInterval(sampler);
  await runner.stop();
  await transport.close();
  process.send?.({ type: 'result', result: { completed, failed, ms, rssMax, cpuMs: (cpu.user + cpu.system) / 1000, cpuWindow } } satisfies GraphileWorkerMessage);
  process.exit(0);
}

if (process.env.BENCH_GW_WORKER) {
  main().catch((err: unknown) => {
    process.send?.({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies GraphileWorkerMessage);
    process.exit(1);
  });
}
