/** Starts bench/relay-worker.ts in a child process and collects its figures. */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BrokerSpec } from './broker-transports.ts';
import type { MetricsKind } from './metrics-setups.ts';
import type { CpuWindow } from './cpu-window.ts';

export interface RelayWorkerConfig {
  readonly schema: string;
  readonly batchSize: number;
  readonly lanes: number;
  readonly deleteOnPublish: boolean;
  /** Stop once this many events are published; without it, run until `stop()`. */
  readonly expect?: number;
  readonly pollIntervalMs?: number;
  readonly leaseTtlMs?: number;
  /** The store's wake mode (default notify). */
  readonly wake?: 'notify' | 'wal';
  /** Report `leases` (buckets held) and `progress` (events published so far, after every batch) messages. */
  readonly progress?: boolean;
  /** Lease buckets at once but claim nothing until `go()`. */
  readonly gated?: boolean;
  /**
   * `http`: txbox's HttpTransport (undici). `http-node`: bench/node-http-transport.ts, the transport as it was on
   * node:http, for same-run comparisons (bench/http-clients.ts).
   */
  readonly transport: { readonly kind: 'noop' } | { readonly kind: 'http' | 'http-node'; readonly url: string } | { readonly kind: 'broker'; readonly spec: BrokerSpec };
  /**
   * `src` (default): the store's own complete statement. `any-array`: the
   * experiment of bench/complete-experiment.ts, a fence check the planner cannot
   * turn into a nested loop over (buckets x batch).
   */
  readonly complete?: 'src' | 'any-array';
  /** Record, per event id, wall-clock claim start, claim end and publish end (returned as `trace`). */
  readonly trace?: boolean;
  /** The relay's metrics (bench/metrics-setups.ts). Default: the relay's default. */
  readonly metrics?: MetricsKind;
  /** Extra node/V8 flags for the relay process (e.g. `--max-semi-space-size=4`). */
  readonly nodeFlags?: readonly string[];
  /**
   * `dist`: run bench/relay-worker-dist.mjs instead, plain node over the built package (no tsx, no
   * benchmark modules; no-op transport and no-op drains only; build dist/ first). Default: `src`.
   */
  readonly build?: 'src' | 'dist';
}

export interface RelayWorkerResult {
  readonly published: number;
  /** From just before `relay.start()` to the batch that reached `expect` (or to `stop()`). */
  readonly ms: number;
  readonly batches: number;
  /** Claims that returned events, and their total SQL time. */
  readonly claims: number;
  readonly emptyClaims: number;
  readonly claimMs: number;
  /** Average claim time over the first and the last tenth of the claims: growth means the scan slows as the table changes. */
  readonly claimMsFirstTenth: number;
  readonly claimMsLastTenth: number;
  readonly completes: number;
  readonly completeMs: number;
  /** RSS after loading modules and before the relay starts, and the maximum sampled every 100 ms while it runs. */
  readonly rssBaseline: number;
  readonly rssMax: number;
  readonly heapMax: number;
  /** Relay 'error' events, grouped: `phase: message (xN)`. */
  readonly errors: readonly string[];
  /** Completions rejected by the lease fence. */
  readonly fenced: number;
  /** Relay errors that were PostgreSQL deadlocks (any phase). */
  readonly deadlocks: number;
  /** CPU time (user + system) of the relay process over `ms`. */
  readonly cpuMs?: number;
  /** The machine's and PostgreSQL's CPU time over `ms` (bench/cpu-window.ts), when `expect` was reached. */
  readonly cpuWindow?: CpuWindow;
  /** With `trace`: [event id, claim sent, claim returned, publish resolved], wall-clock ms. */
  readonly trace?: readonly (readonly [string, number, number, number])[];
}

export type RelayWorkerMessage =
  | { readonly type: 'started' }
  | { readonly type: 'result'; readonly result: RelayWorkerResult }
  | { readonly type: 'leases'; readonly held: number }
  | { readonly type: 'progress'; readonly published: number }
  | { readonly type: 'error'; readonly message: string };

export interface RelayWorker {
  /** Resolves once the relay has started (leases taken, lanes running). */
  readonly started: Promise<void>;
  /** Resolves when the worker has reported (after `expect` events, or after `stop()`). */
  readonly result: Promise<RelayWorkerResult>;
  /** Lets a `gated` worker start claiming. */
  go(): void;
  stop(): Promise<RelayWorkerResult>;
}

const WORKER = fileURLToPath(new URL('./relay-worker.ts', import.meta.url));
const WORKER_DIST = fileURLToPath(new URL('./relay-worker-dist.mjs', import.meta.url));

export function startRelayWorker(config: RelayWorkerConfig, onReport?: (m: RelayWorkerMessage & { type: 'leases' | 'progress' }) => void): RelayWorker {
  const dist = config.build === 'dist';
  const child = fork(dist ? WORKER_DIST : WORKER, [], {
    execArgv: [
      ...(dist ? [] : ['--conditions=txbox-source', '--import', 'tsx']),
      ...(process.env.BENCH_RELAY_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_RELAY_CPU_PROF}`] : []),
      ...(config.nodeFlags ?? []),
    ],
    env: { ...process.env, BENCH_RELAY_WORKER: JSON.stringify(config) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let onStarted: () => void = () => {};
  let onResult: (r: RelayWorkerResult) => void = () => {};
  let onError: (e: Error) => void = () => {};
  const started = new Promise<void>((resolve, reject) => {
    onStarted = resolve;
    onError = reject;
  });
  const result = new Promise<RelayWorkerResult>((resolve, reject) => {
    onResult = resolve;
    const prev = onError;
    onError = (e) => {
      prev(e);
      reject(e);
    };
  });
  started.catch(() => {});
  child.on('message', (m: RelayWorkerMessage) => {
    if (m.type === 'started') onStarted();
    else if (m.type === 'result') {
      onResult(m.result);
      // The worker exits by itself after reporting; never let a stuck one keep this process alive.
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
    }
    else if (m.type === 'leases' || m.type === 'progress') onReport?.(m);
    else onError(new Error(`relay worker failed: ${m.message}`));
  });
  child.on('exit', (code) => onError(new Error(`relay worker exited with code ${String(code)} before reporting`)));
  return {
    started,
    result,
    go() {
      if (child.connected) child.send({ type: 'go' });
    },
    stop() {
      if (child.connected) child.send({ type: 'stop' });
      return result;
    },
  };
}
