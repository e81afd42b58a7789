import type { HealthCheck, HealthReport } from '../../core/health.ts';
import type { Logger } from '../../core/logger.ts';
import { brokerOutage } from '../../core/broker-outage.ts';
import { AbortedError } from '../../core/errors.ts';

export type ConsumerState = 'stopped' | 'starting' | 'running' | 'stopping';

/** The counters every consumer keeps (since construction); each adds its broker's own. */
export interface ConsumerCounts {
  received: number;
  processed: number;
  duplicate: number;
  ignored: number;
  held: number;
  queued: number;
  dead: number;
  /** Unreadable messages, and events the inbox queue refused. */
  rejected: number;
}

/** The `error` event every consumer emits: an operation failed and is retried. Never a payload. */
export interface ConsumerErrorEvent {
  readonly operation: string;
  readonly message: string;
}

/** What a broker adapter tells the core about itself. */
export interface ConsumerCoreOptions {
  /** Short broker name for log lines, e.g. `nats`. */
  readonly name: string;
  readonly logger: Logger;
  /** Fields every log line of this consumer carries (never a secret). */
  readonly context: () => Record<string, unknown>;
  /** Receives every failure as an `error` event. */
  readonly onError: (operation: string, message: string) => void;
  /** The adapter's view of its broker connection; omitted: connected while running. */
  readonly connected?: () => boolean;
  /** How a failure reads in events and logs; default: `Name: message`. */
  readonly describe?: (err: unknown) => string;
  /** Log a failing operation once per outage (until `recovered`) instead of at every failure. */
  readonly logOncePerOutage?: boolean;
  /** Log line prefix, default `txbox <name> consumer`. */
  readonly prefix?: string;
  /**
   * Whether a failed start is an outage that waiting heals (the reason) or
   * configuration (null: start() rejects at once). Default: `brokerOutage`,
   * network errors anywhere in the error's cause chain.
   */
  readonly outage?: (err: unknown) => string | null;
  /** Pauses between start attempts during an outage: from `initialMs`, doubling, capped at `maxMs` (equal jitter). Default 500 and 15000. */
  readonly startRetry?: { readonly initialMs: number; readonly maxMs: number };
}

/**
 * What every broker consumer shares: the start/stop lifecycle (concurrent
 * calls coalesce, stop waits for a start in progress, start waits for a stop),
 * the stop signal that ends retry waits, abortable pauses, failure reporting
 * (an `error` event each time, a log line per failure or per outage) and the
 * consumer's `health()`. The broker adapter keeps only what its broker does:
 * connect, receive, ack, redeliver later, dead-letter.
 *
 * @example
 * readonly #core = new ConsumerCore({ name: 'pubsub', logger, context: () => ({ subscription }), onError: (operation, message) => this.events.fire('error', { operation, message }) });
 * start() { return this.#core.start(() => this.#open()); }
 */
export { within } from '../../core/abort.ts';

export class ConsumerCore {
  readonly #o: ConsumerCoreOptions;
  readonly #failing = new Set<string>();
  #state: ConsumerState = 'stopped';
  #starting: Promise<void> | null = null;
  #stopping: Promise<void> | null = null;
  #stop = new AbortController();
  /** Aborted by stop() during a start: ends the wait between start attempts. */
  #startWait = new AbortController();
  #lastError: { operation: string; message: string; at: Date } | null = null;

  constructor(options: ConsumerCoreOptions) {
    this.#o = options;
  }

  get state(): ConsumerState {
    return this.#state;
  }

  /** Aborted when stop() begins: waits to retry end, messages not yet handled are left for redelivery. */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  get running(): boolean {
    return this.#state === 'running';
  }

  /**
   * Runs `open` (concurrent calls share one start) after any stop in progress.
   * While it runs the state is `starting`; it becomes `running` when `open`
   * resolves (then `running` runs: loops that check the state start there).
   * When `open` fails because the broker does not answer (`outage`), it is
   * run again after a capped backoff, with a warning and an `error` event
   * (operation `start`) per attempt, until it succeeds, stop() is called or
   * `signal` aborts (then start() rejects with AbortedError). Any other
   * failure (configuration) makes the state `stopped` and is rethrown at once.
   * `open` gets a signal that aborts when stop() comes during the start: an
   * adapter that can cut its attempt short (close its sockets) listens to it.
   */
  async start(open: (cancel: AbortSignal) => Promise<void>, running?: () => void, signal?: AbortSignal): Promise<void> {
    if (this.#stopping) await this.#stopping;
    if (this.#state === 'running') return;
    this.#starting ??= (async () => {
      this.#state = 'starting';
      this.#stop = new AbortController();
      this.#startWait = new AbortController();
      const wait = signal ? AbortSignal.any([this.#startWait.signal, signal]) : this.#startWait.signal;
      for (let attempt = 1; ; attempt++) {
        try {
          await open(wait);
          break;
        } catch (err) {
          const reason = (this.#o.outage ?? brokerOutage)(err);
          if (reason === null || wait.aborted) {
            this.#state = 'stopped';
            throw reason === null ? err : new AbortedError(`${this.#prefix()}: stopped before the broker answered (last: ${reason})`);
          }
          const delayMs = this.#startDelay(attempt);
          // The adapter's message names the setting to check (`servers: cannot connect to NATS at ...; check servers ...`).
          const message = (this.#o.describe ?? describeError)(err);
          this.#lastError = { operation: 'start', message, at: new Date() };
          this.#o.onError('start', message);
          this.#o.logger.warn(
            { ...this.#o.context(), operation: 'start', attempt, delayMs, reason, err: message },
            `${this.#prefix()}: the broker does not answer at start; retrying in ${delayMs} ms until it does or stop() is called`,
          );
          if (!(await pause(delayMs, wait))) {
            this.#state = 'stopped';
            throw new AbortedError(`${this.#prefix()}: stopped before the broker answered (last: ${reason})`);
          }
        }
      }
      if (this.#lastError?.operation === 'start') {
        this.#lastError = null;
        this.#o.logger.info(this.#o.context(), `${this.#prefix()}: the broker answered; started`);
      }
      this.#state = 'running';
      running?.();
    })().finally(() => (this.#starting = null));
    return this.#starting;
  }

  #startDelay(attempt: number): number {
    const { initialMs, maxMs } = this.#o.startRetry ?? { initialMs: 500, maxMs: 15_000 };
    const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(attempt - 1, 20));
    return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
  }

  /**
   * Waits for a start in progress, then, if running, sets `stopping`, aborts
   * the stop signal (unless `abortFirst` is false: the adapter aborts it with
   * `abort()` when it is ready) and runs `close`; the state is `stopped` after.
   */
  stop(close: () => Promise<void>, abortFirst = true): Promise<void> {
    if (this.#state === 'stopped' && !this.#starting) return Promise.resolve();
    this.#stopping ??= (async () => {
      // A start waiting for the broker gives up; an attempt in flight is cut short where the adapter listens to
      // open's signal, otherwise it finishes (bounded by the client's connect and request timeouts).
      this.#startWait.abort();
      if (this.#starting) await this.#starting.catch(() => {});
      if (this.#state !== 'running') return;
      this.#state = 'stopping';
      if (abortFirst) this.#stop.abort();
      try {
        await close();
      } finally {
        this.#state = 'stopped';
      }
    })().finally(() => (this.#stopping = null));
    return this.#stopping;
  }

  /** Aborts the stop signal (for adapters that stop() with `abortFirst` false). */
  abort(): void {
    this.#stop.abort();
  }

  /** Waits `ms`; false when stop() came first. */
  pause(ms: number, signal: AbortSignal = this.#stop.signal): Promise<boolean> {
    return pause(ms, signal);
  }

  /**
   * Runs `fn` until it resolves: each failure is reported (`failed`) and
   * followed by a doubling backoff, a success after failures is `recovered`.
   * Null once `signal` (default: the stop signal) aborted a wait.
   */
  async retrying<T>(operation: string, fn: () => Promise<T>, signal: AbortSignal = this.#stop.signal): Promise<T | null> {
    for (let failures = 0; ; failures++) {
      try {
        const result = await fn();
        if (failures > 0) this.recovered(operation);
        return result;
      } catch (err) {
        this.failed(operation, err);
        if (!(await pause(backoffMs(failures), signal))) return null;
      }
    }
  }

  /** Reports a failure that is retried: an `error` event each time, a warning in the log. */
  failed(operation: string, err: unknown): void {
    const o = this.#o;
    const message = typeof err === 'string' ? err : (o.describe ?? describeError)(err);
    this.#lastError = { operation, message, at: new Date() };
    o.onError(operation, message);
    if (o.logOncePerOutage) {
      if (this.#failing.has(operation)) return;
      this.#failing.add(operation);
    }
    o.logger.warn({ ...o.context(), operation, err: message }, `${this.#prefix()}: operation failed; retrying`);
  }

  /** An operation that failed works again: logged once, and health no longer reports it. */
  recovered(operation: string): void {
    if (this.#lastError?.operation === operation) this.#lastError = null;
    if (this.#failing.delete(operation)) this.#o.logger.info({ ...this.#o.context(), operation }, `${this.#prefix()}: operation works again`);
  }

  /**
   * Live while starting or running; ready when running and connected. The
   * last failure not followed by a recovery is a failed `last-error` check.
   */
  health(): Promise<HealthReport> {
    const running = this.#state === 'running';
    const connected = running && (this.#o.connected?.() ?? true);
    const checks: HealthCheck[] = [
      { name: 'running', ok: running, detail: `the ${this.#o.name} consumer is ${this.#state}` },
      { name: 'connection', ok: connected, detail: connected ? `connected to ${this.#o.name}` : `not connected to ${this.#o.name}` },
    ];
    const last = this.#lastError;
    if (last !== null) checks.push({ name: 'last-error', ok: false, detail: `${last.operation} failed at ${last.at.toISOString()}: ${last.message.slice(0, 300)}` });
    return Promise.resolve({ live: running || this.#state === 'starting', ready: running && connected, checks });
  }

  #prefix(): string {
    return this.#o.prefix ?? `txbox ${this.#o.name} consumer`;
  }
}

/** Waits `ms`; false when `signal` aborted first. */
export function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(ok);
    };
    const onAbort = (): void => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Doubling backoff after the `failures`-th failure in a row: `baseMs` × 2^n, at most `maxMs`. */
export function backoffMs(failures: number, baseMs = 200, maxMs = 30_000): number {
  return Math.min(maxMs, baseMs * 2 ** Math.min(failures, 16));
}

function describeError(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}
