/** Counts over a sliding window of whole seconds (for "published in the last minute"). */
export class RateWindow {
  readonly #slots: number[];
  readonly #stamps: number[];

  constructor(private readonly seconds: number) {
    this.#slots = new Array<number>(seconds).fill(0);
    this.#stamps = new Array<number>(seconds).fill(-1);
  }

  add(n: number, now: number = Date.now()): void {
    const sec = Math.floor(now / 1000);
    const i = sec % this.seconds;
    if (this.#stamps[i] !== sec) {
      this.#stamps[i] = sec;
      this.#slots[i] = 0;
    }
    this.#slots[i]! += n;
  }

  total(now: number = Date.now()): number {
    const sec = Math.floor(now / 1000);
    let sum = 0;
    for (let i = 0; i < this.seconds; i++) if (sec - this.#stamps[i]! < this.seconds) sum += this.#slots[i]!;
    return sum;
  }
}
