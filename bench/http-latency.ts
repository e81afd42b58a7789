/**
 * Commit-to-ack latency through the HTTP transport: a steady BENCH_HTTP_RATE
 * (1,000) single-event transactions per second for BENCH_HTTP_SECONDS (30),
 * relayed (LISTEN/NOTIFY, defaults) as webhooks to an in-process node:http
 * receiver answering 204. Commit time: just after COMMIT returned to the
 * producer; ack time: when the receiver got the request. Same process, one clock.
 *
 *   node --conditions=txbox-source --import tsx bench/http-latency.ts
 *
 * Settings: BENCH_HTTP_RATE (1000), BENCH_HTTP_SECONDS (30), BENCH_LATENCY_CLIENTS (8), BENCH_KEYS (1000),
 * BENCH_NOTIFY (1; 0 relies on the relay's polling), BENCH_RELAY_IN_PROCESS (0), BENCH_RECEIVER_IN_CHILD (0), BENCH_LANES,
 * BENCH_HTTP_EVENTS_PER_TX (1; raise it when single-event commits cannot reach the rate on a busy machine).
 * BENCH_TRACE=1 (relay in a child process only): print where each event's time went, step by step.
 */
import { envInt, fmtInt, log, summary, withBench } from './lib.ts';
import { fmtMs, measureCommitToAck } from './commit-to-ack.ts';

const RATE = envInt('BENCH_HTTP_RATE', 1000);
const SECONDS = envInt('BENCH_HTTP_SECONDS', 30);
const CLIENTS = envInt('BENCH_LATENCY_CLIENTS', 8);
const KEYS = envInt('BENCH_KEYS', 1000);
const PER_TX = envInt('BENCH_HTTP_EVENTS_PER_TX', 1);
const NOTIFY = process.env.BENCH_NOTIFY !== '0';

await withBench('httplat', async (bench) => {
  log(`HTTP latency benchmark: ${RATE} events/s for ${SECONDS} s, ${PER_TX} event(s) per transaction, notify ${NOTIFY}, ${CLIENTS} producer connections, ${KEYS} keys, schema ${bench.schema}`);
  const r = await measureCommitToAck(bench, { rate: RATE, seconds: SECONDS, clients: CLIENTS, keys: KEYS, eventsPerTx: PER_TX, notify: NOTIFY, pollIntervalMs: 1000, transport: 'http', relayInChild: process.env.BENCH_RELAY_IN_PROCESS !== '1', receiverInChild: process.env.BENCH_RECEIVER_IN_CHILD === '1', ...(process.env.BENCH_LANES ? { lanes: envInt('BENCH_LANES', 2) } : {}) });
  log(`produced ${fmtInt(r.produced)} at ${fmtInt(r.achievedRate)}/s; received ${fmtInt(r.acked)}`);
  log(`commit-to-ack: p50 ${fmtMs(r.p50)} ms, p90 ${fmtMs(r.p90)} ms, p99 ${fmtMs(r.p99)} ms, max ${fmtMs(r.max)} ms, mean ${fmtMs(r.mean)} ms; ${fmtInt(r.batches)} relay batches; event-loop delay p99 ${fmtMs(r.loopDelayP99)} ms, max ${fmtMs(r.loopDelayMax)} ms`);
  summary('http-latency', `${fmtInt(r.achievedRate)} events/s (target ${RATE}, ${PER_TX}/tx) for ${SECONDS} s: commit-to-ack p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms, max ${fmtMs(r.max)} ms (${fmtInt(r.acked)}/${fmtInt(r.produced)} received)`);
});
