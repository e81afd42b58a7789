/**
 * Runs tasks one after another per key and concurrently across keys, with a
 * bound on how many run at once. Consumers use it to keep per-key order
 * while handling many keys in parallel.
 */
export class KeyedDispatcher {
  readonly #tails = new Map<string, Promise<void>>();
  readonly #waiting: (() => void)[] = [];
  #running = 0;
  #pending = 0;
  #idle: (() => void)[] = [];

  constructor(private readonly concurrency: number) {
    if (!Number.isSafeInteger(concurrency) || concurrency < 1) throw new RangeError('concurrency must be a positive integer');
  }

  /** Tasks queued or running. */
  get size(): number {
    return this.#pending;
  }

  /**
   * Queues `task` behind earlier tasks of `key`. Resolves when the task has
   * run; rejects with its error (later tasks of the key still run).
   */
  push(key: string, task: () => Promise<void>): Promise<void> {
    this.#pending++;
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const run = previous.then(async () => {
      await this.#slot();
      try {
        await task();
      } finally {
        this.#running--;
        this.#waiting.shift()?.();
      }
    });
    const tail = run.catch(() => {}).finally(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
      if (--this.#pending === 0) for (const resolve of this.#idle.splice(0)) resolve();
    });
    this.#tails.set(key, tail);
    return run;
  }

  /** Resolves when every queued task has finished. */
  onIdle(): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #slot(): Promise<void> {
    if (this.#running < this.concurrency) {
      this.#running++;
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.#waiting.push(() => {
        this.#running++;
        resolve();
      }),
    );
  }
}
