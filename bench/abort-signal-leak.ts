/**
 * Shows why the relay does not combine signals per publish call with
 * `AbortSignal.any([relaySignal, AbortSignal.timeout(ms)])`: on Node 20 each
 * combined signal stays reachable from the long-lived relay signal after its
 * call is over (and after its timeout fired), so the heap grows with every
 * call. The relay's CallSignal (src/relay/call-signal.ts: one controller, one
 * timer, one listener, all released after the call) is measured alongside.
 *
 *   node --conditions=txbox-source --import tsx bench/abort-signal-leak.ts
 *
 * Settings: BENCH_CALLS (200000).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CallSignal } from '../src/relay/call-signal.ts';
import { envInt, fmtInt, log, mb, summary } from './lib.ts';

const CALLS = envInt('BENCH_CALLS', 200_000);
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heap = (): number => {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
};
const relaySignal = new AbortController().signal;

const patterns: Record<string, () => Promise<void>> = {
  'AbortSignal.any + AbortSignal.timeout': async () => {
    const signal = AbortSignal.any([relaySignal, AbortSignal.timeout(20)]);
    await Promise.resolve(signal.aborted);
  },
  CallSignal: async () => {
    const call = new CallSignal(relaySignal, 20, () => Infinity);
    try {
      await Promise.resolve(call.signal.aborted);
    } finally {
      call.dispose();
    }
  },
};

log(`abort-signal leak: ${fmtInt(CALLS)} calls per pattern, node ${process.version}`);
const results: string[] = [];
for (const [name, call] of Object.entries(patterns)) {
  for (let i = 0; i < 1000; i++) await call();
  await new Promise((r) => setTimeout(r, 100));
  const before = heap();
  for (let i = 0; i < CALLS; i++) await call();
  await new Promise((r) => setTimeout(r, 200)); // every 20 ms timeout has fired
  const grown = heap() - before;
  const line = `${name}: heap +${mb(Math.max(0, grown))} MB over ${fmtInt(CALLS)} calls (${(grown / CALLS).toFixed(1)} bytes per call)`;
  log(line);
  results.push(line);
}
summary('abort-signal-leak', results.join('; '));
