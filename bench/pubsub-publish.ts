/**
 * Pub/Sub publish settings, compared within one run against the emulator
 * (scripts/pubsub/up.sh): PubSubTransport.publish() in calls of BENCH_BATCH
 * events over BENCH_KEYS keys (as the relay calls it), with txbox's batching
 * (one flush per call, up to 1000 messages per request) against the client's
 * defaults (100 messages or 10 ms per request) and without message ordering.
 * Prints events/s, p50/p99 of a call, and RSS. No database.
 *
 *   node --conditions=txbox-source --import tsx bench/pubsub-publish.ts
 *   BENCH_EVENTS=20000 BENCH_BATCH=500 BENCH_ROUNDS=3 ...
 */
import { randomBytes } from 'node:crypto';
import { PubSubTransport, type PubSubTransportOptions } from 'txbox/pubsub';
import { adminClient, EMULATOR_HOST, emulatorSkip, PROJECT } from '../test/helpers/pubsub.ts';
import { envInt, machine, percentile, printTable, timePublishCalls } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 20_000);
const BATCH = envInt('BENCH_BATCH', 500);
const KEYS = envInt('BENCH_KEYS', 100);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const run = randomBytes(4).toString('hex');

const variants: { name: string; options: Partial<PubSubTransportOptions> }[] = [
  { name: 'txbox default (flush per call, 1000/request)', options: {} },
  { name: 'client defaults (100/request, 10 ms)', options: { batching: { maxMessages: 100, maxBytes: 1024 * 1024, maxMilliseconds: 10 } } },
  { name: 'txbox default, messageOrdering off', options: { messageOrdering: false } },
];

const skip = await emulatorSkip();
if (skip) {
  console.log(`skipped: ${skip}`);
  process.exit(0);
}
const admin = adminClient();
const topic = `bench-${run}`;
await admin.createTopic(topic);
const payload = { pad: 'x'.repeat(200) };

async function once(options: Partial<PubSubTransportOptions>): Promise<{ rate: number; calls: number[] }> {
  const transport = new PubSubTransport({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, topics: { orders: topic }, ...options });
  return timePublishCalls(transport, { events: EVENTS, batch: BATCH, keys: KEYS, payload });
}

console.log(machine());
console.log(`${EVENTS} events in calls of ${BATCH} over ${KEYS} keys, ${ROUNDS} rounds (variants interleaved), emulator at ${EMULATOR_HOST}`);
const results = new Map<string, { rates: number[]; calls: number[] }>(variants.map((v) => [v.name, { rates: [], calls: [] }]));
await once({}); // warm-up: JIT, channel
for (let round = 0; round < ROUNDS; round++) {
  for (const v of variants) {
    const r = await once(v.options);
    results.get(v.name)!.rates.push(r.rate);
    results.get(v.name)!.calls.push(...r.calls);
  }
}
const rows = variants.map((v) => {
  const r = results.get(v.name)!;
  const sorted = [...r.calls].sort((a, b) => a - b);
  return [v.name, r.rates.map((x) => Math.round(x).toLocaleString('en-US')).join(' / '), percentile(sorted, 50).toFixed(1), percentile(sorted, 99).toFixed(1)];
});
printTable(['variant', 'events/s per round', 'call p50 ms', 'call p99 ms'], rows);
console.log(`RSS ${(process.memoryUsage().rss / 1048576).toFixed(1)} MB`);
await admin.topic(topic).delete().catch(() => {});
await admin.close();
