/**
 * Publisher flow control of one transport: at most `maxMessages` messages
 * and `maxBytes` bytes sent and not yet acked by Pub/Sub; a publish beyond
 * that waits until earlier ones are acked (or its call is aborted).
 */
export class OutstandingLimit {
  readonly #maxMessages: number;
  readonly #maxBytes: number;
  #messages = 0;
  #bytes = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(maxMessages: number, maxBytes: number) {
    this.#maxMessages = maxMessages;
    this.#maxBytes = maxBytes;
  }

  /** Whether `acquire(bytes)` would wait now. */
  full(bytes: number): boolean {
    return this.#messages > 0 && (this.#messages >= this.#maxMessages || this.#bytes + bytes > this.#maxBytes);
  }

  /** Takes room for one message of `bytes`; false when `signal` aborted first. A message larger than maxBytes goes alone. */
  async acquire(bytes: number, signal: AbortSignal): Promise<boolean> {
    while (this.full(bytes)) {
      if (signal.aborted) return false;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener('abort', done);
          resolve();
        };
        this.#waiting.push(done);
        signal.addEventListener('abort', done, { once: true });
      });
    }
    if (signal.aborted) return false;
    this.#messages++;
    this.#bytes += bytes;
    return true;
  }

  release(bytes: number): void {
    this.#messages--;
    this.#bytes -= bytes;
    for (const wake of this.#waiting.splice(0)) wake();
  }
}
