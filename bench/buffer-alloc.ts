/**
 * What one `Buffer.alloc(512)` costs, against `Buffer.allocUnsafe(512)` from
 * Node's pool: kafkajs allocates a zero-filled 512-byte Encoder buffer for
 * every record and every header (docs/performance-notes.md, section 6). The
 * buffers are kept in a ring so the allocation cannot be optimized away.
 *
 *   node --conditions=txbox-source --import tsx bench/buffer-alloc.ts
 *
 * Settings: BENCH_ALLOCS (1000000 per round), BENCH_ROUNDS (3), BENCH_ALLOC_BYTES (512).
 */
import { envInt, log, summary } from './lib.ts';

const N = envInt('BENCH_ALLOCS', 1_000_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const BYTES = envInt('BENCH_ALLOC_BYTES', 512);
const ring = new Array<Buffer>(1024);

function nsPerAlloc(alloc: (n: number) => Buffer): number {
  const started = performance.now();
  for (let i = 0; i < N; i++) ring[i & 1023] = alloc(BYTES);
  return ((performance.now() - started) / N) * 1e6;
}

const zeroed: number[] = [];
const pooled: number[] = [];
for (let r = 1; r <= ROUNDS; r++) {
  zeroed.push(nsPerAlloc((n) => Buffer.alloc(n)));
  pooled.push(nsPerAlloc((n) => Buffer.allocUnsafe(n)));
  log(`round ${r}, node ${process.version}: Buffer.alloc(${BYTES}) ${zeroed.at(-1)!.toFixed(0)} ns, Buffer.allocUnsafe(${BYTES}) ${pooled.at(-1)!.toFixed(0)} ns`);
}
const range = (xs: number[]): string => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)} ns`;
summary('buffer-alloc', `node ${process.version}: Buffer.alloc(${BYTES}) ${range(zeroed)}, Buffer.allocUnsafe(${BYTES}) ${range(pooled)} per call`);
