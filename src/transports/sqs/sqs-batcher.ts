/**
 * Collects the entries of one SQS batch request (DeleteMessageBatch,
 * ChangeMessageVisibilityBatch) across settles, so that a request carries up
 * to 10 of them instead of what happened to finish in the same turn.
 *
 * - 10 waiting: sent at once;
 * - fewer: sent at the end of the turn when no request of this batcher is in
 *   flight, otherwise when the last one in flight answers (by then more
 *   have usually come: under load the requests fill up by themselves, and
 *   an idle consumer sends at once). A request is bounded by the consumer's
 *   requestTimeoutMs, so nothing waits longer than that.
 *
 * No timer, none per message. `send` must never throw (the consumer reports
 * failures itself). `flush()` sends what waits and waits for every request
 * in flight (stop).
 */
export const SQS_BATCH_MAX = 10;

export class SqsBatcher<T> {
  readonly #send: (entries: T[]) => Promise<void>;
  #waiting: T[] = [];
  readonly #inFlight = new Set<Promise<void>>();
  #scheduled = false;

  constructor(send: (entries: T[]) => Promise<void>) {
    this.#send = send;
  }

  /** Entries waiting to be sent (not yet in a request). */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Requests sent and not yet answered. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  add(entry: T): void {
    this.#waiting.push(entry);
    if (this.#waiting.length >= SQS_BATCH_MAX) this.#request(this.#waiting.splice(0, SQS_BATCH_MAX));
    if (this.#waiting.length === 0 || this.#scheduled) return;
    this.#scheduled = true;
    // The rest of this turn's settles join the batch.
    setImmediate(() => {
      this.#scheduled = false;
      if (this.#inFlight.size === 0) this.#sendPartial();
    });
  }

  /** Sends everything waiting now and resolves once every request answered. */
  async flush(): Promise<void> {
    while (this.#waiting.length > 0) this.#request(this.#waiting.splice(0, SQS_BATCH_MAX));
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  #sendPartial(): void {
    if (this.#waiting.length > 0) this.#request(this.#waiting.splice(0, SQS_BATCH_MAX));
  }

  #request(entries: T[]): void {
    const sent = this.#send(entries).catch(() => {});
    this.#inFlight.add(sent);
    void sent.then(() => {
      this.#inFlight.delete(sent);
      if (this.#inFlight.size === 0 && this.#waiting.length > 0 && !this.#scheduled) this.#sendPartial();
    });
  }
}
