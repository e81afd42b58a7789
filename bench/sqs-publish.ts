/**
 * SQS publish settings, compared within one run against ElasticMQ
 * (scripts/sqs/up.sh): SqsTransport.publish() in calls of BENCH_BATCH events
 * over BENCH_KEYS keys (as the relay calls it: one event per key per call),
 * to a FIFO queue and to a standard queue, with batches of up to 10 entries
 * (the default) and with one entry per request (maxBatchBytes at its minimum
 * forces it for these events). Prints events/s per round, p50/p99 of a call,
 * and RSS. No database.
 *
 *   bash scripts/sqs/up.sh
 *   node --conditions=txbox-source --import tsx bench/sqs-publish.ts
 *   BENCH_EVENTS=10000 BENCH_BATCH=100 BENCH_ROUNDS=3 ...
 */
import { SqsTransport, type SqsTransportOptions } from 'txbox/sqs';
import { createQueue, deleteQueues, SQS_ENDPOINT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../test/helpers/sqs.ts';
import { envInt, machine, percentile, printTable, timePublishCalls } from './lib.ts';

const EVENTS = envInt('BENCH_EVENTS', 10_000);
const BATCH = envInt('BENCH_BATCH', 100);
const KEYS = envInt('BENCH_KEYS', 100);
const ROUNDS = envInt('BENCH_ROUNDS', 3);

const admin = sqsClient();
const fifo = await createQueue(admin, uniqueQueueName('bench', true));
const standard = await createQueue(admin, uniqueQueueName('bench', false));
const payload = { pad: 'x'.repeat(200) };

const variants: { name: string; queue: string; options: Partial<SqsTransportOptions> }[] = [
  { name: 'FIFO, batches of 10 (default)', queue: fifo, options: {} },
  { name: 'FIFO, one entry per request', queue: fifo, options: { maxBatchBytes: 1024 } },
  { name: 'standard, batches of 10 (default)', queue: standard, options: {} },
  { name: 'standard, one entry per request', queue: standard, options: { maxBatchBytes: 1024 } },
];

async function once(queue: string, options: Partial<SqsTransportOptions>): Promise<{ rate: number; calls: number[] }> {
  const transport = new SqsTransport({ queues: { orders: queue }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS, ...options });
  return timePublishCalls(transport, { events: EVENTS, batch: BATCH, keys: KEYS, payload });
}

console.log(machine());
console.log(`${EVENTS} events in calls of ${BATCH} over ${KEYS} keys, ${ROUNDS} rounds (variants interleaved), ElasticMQ at ${SQS_ENDPOINT}`);
const results = new Map<string, { rates: number[]; calls: number[] }>(variants.map((v) => [v.name, { rates: [], calls: [] }]));
await once(fifo, {}); // warm-up: JIT, sockets
for (let round = 0; round < ROUNDS; round++) {
  for (const v of variants) {
    const r = await once(v.queue, v.options);
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
await deleteQueues(admin, [fifo, standard]);
admin.destroy();
