/**
 * A progress line for long operations: redrawn in place on a terminal,
 * printed at most every few seconds otherwise (logs, CI).
 */
export class Progress {
  #last = 0;
  #drawn = false;
  readonly #tty: boolean;

  constructor(
    private readonly stream: NodeJS.WriteStream = process.stderr,
    private readonly everyMs = 3000,
  ) {
    this.#tty = Boolean(stream.isTTY);
  }

  update(text: string, force = false): void {
    const now = Date.now();
    if (this.#tty) {
      if (!force && now - this.#last < 100) return;
      this.stream.write(`\r\x1b[2K${text}`);
      this.#drawn = true;
    } else {
      if (!force && now - this.#last < this.everyMs) return;
      this.stream.write(`${text}\n`);
    }
    this.#last = now;
  }

  done(text?: string): void {
    if (this.#tty && this.#drawn) this.stream.write(`\r\x1b[2K`);
    if (text) this.stream.write(`${text}\n`);
    this.#drawn = false;
  }
}

export const fmt = (n: number): string => n.toLocaleString('en-US');
