/** A seeded random source (mulberry32), so that `--seed` replays a run's choices. */
export class Random {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
}

/** Draws indexes 0..n-1 with probability proportional to 1 / (i + 1) (Zipf, s = 1): a few hot keys, a long tail. */
export class Zipf {
  readonly #cdf: Float64Array;

  constructor(n: number) {
    this.#cdf = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) this.#cdf[i] = sum += 1 / (i + 1);
    for (let i = 0; i < n; i++) this.#cdf[i]! /= sum;
  }

  draw(random: Random): number {
    const u = random.next();
    let lo = 0;
    let hi = this.#cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.#cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
