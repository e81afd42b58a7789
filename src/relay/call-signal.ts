import { performance } from 'node:perf_hooks';

/** Why a publish call's signal aborted. */
export type CallAbortCause = 'stop' | 'timeout' | 'lease';

/**
 * The signal of one transport call: aborts when the relay stops now
 * (`parent`), after `timeoutMs`, or when the local lease deadline of the
 * call's buckets passes (`deadline()`, on the performance.now() clock; read
 * again when the timer fires, since a renewal moves it later).
 *
 * One AbortController, one timer and one listener on `parent`, all released
 * by `dispose()`. `AbortSignal.any([parent, AbortSignal.timeout(ms)])` per
 * call kept every combined signal reachable from `parent` for the relay's
 * life on Node 20 (about 100 bytes a call, bench/abort-signal-leak.ts).
 */
export class CallSignal {
  readonly #controller = new AbortController();
  readonly #parent: AbortSignal;
  readonly #end: number;
  readonly #deadline: () => number;
  readonly #timeoutMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #cause: CallAbortCause | undefined;
  readonly #onParentAbort = (): void => this.#abort('stop', this.#parent.reason);

  constructor(parent: AbortSignal, timeoutMs: number, deadline: () => number) {
    this.#parent = parent;
    this.#timeoutMs = timeoutMs;
    this.#end = performance.now() + timeoutMs;
    this.#deadline = deadline;
    if (parent.aborted) {
      this.#abort('stop', parent.reason);
      return;
    }
    parent.addEventListener('abort', this.#onParentAbort, { once: true });
    this.#check();
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Why the signal aborted; undefined while it has not. */
  get cause(): CallAbortCause | undefined {
    return this.#cause;
  }

  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#parent.removeEventListener('abort', this.#onParentAbort);
  }

  #check = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    if (now >= this.#end) return this.#abort('timeout', new Error(`publish timed out after ${this.#timeoutMs} ms`));
    const deadline = this.#deadline();
    if (now >= deadline) return this.#abort('lease', new Error('the lease of the batch ended locally (not renewed in time)'));
    // +1: timers may fire a little early on the performance clock.
    this.#timer = setTimeout(this.#check, Math.ceil(Math.min(this.#end, deadline) - now) + 1);
  };

  #abort(cause: CallAbortCause, reason: unknown): void {
    if (this.#cause !== undefined) return;
    this.#cause = cause;
    this.dispose();
    this.#controller.abort(reason);
  }
}
