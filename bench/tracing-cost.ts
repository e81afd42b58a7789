/**
 * What tracing adds to `outbox.enqueue` on the producer's CPU and to
 * `inbox.process` on the consumer's, without a database (the executor
 * answers at once; the inbox store is in memory; events carry a
 * `traceparent`), in process CPU time (less
 * disturbed by other processes than wall time), compared within one run,
 * rounds interleaved, medians printed: the OpenTelemetry API not installed (as txbox sees it), the
 * API installed with no SDK registered, and an SDK registered with a span
 * active (the trace context is then written into every event's headers),
 * the latter also with txbox blind to the API, which isolates txbox's share
 * from the SDK's context manager (AsyncLocalStorage) cost.
 *
 *   node --conditions=txbox-source --import tsx bench/tracing-cost.ts
 *
 * Settings: BENCH_CALLS (50000 per case and round), BENCH_ROUNDS (9).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { createInbox, createOutbox, type OutboxEvent, type SqlExecutor } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { setOtelApiForTests } from '../src/core/tracing.ts';
import { envInt, log, median, memoryInboxStore, orderEvent, OrderPlaced, printTable, summary } from './lib.ts';

const CALLS = envInt('BENCH_CALLS', 50_000);
const ROUNDS = envInt('BENCH_ROUNDS', 9);

const executor: SqlExecutor = { query: async () => ({ rows: [] }) };
const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'bench', notify: false }), events: [OrderPlaced] });

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const received = (i: number): OutboxEvent => ({
  id: crypto.randomUUID(),
  type: 'OrderPlaced',
  aggregateType: 'Order',
  aggregateId: String(i),
  key: `Order:${i}`,
  destination: 'orders',
  payload: { i },
  headers: { traceparent: TRACEPARENT },
  occurredAt: new Date(),
  version: null,
});

type Work = 'enqueue' | 'process';
let work: Work = 'enqueue';

/** CPU µs per enqueue of one event, or per `process` of one received event (building the event included). */
async function time(): Promise<number> {
  const started = process.cpuUsage();
  if (work === 'enqueue') {
    for (let i = 0; i < CALLS; i++) await outbox.enqueue(executor, orderEvent(i, i % 1000));
  } else {
    const inbox = createInbox({ store: memoryInboxStore(), consumer: 'bench', batch: { maxSize: 1 }, autoStart: false });
    inbox.on('OrderPlaced', () => {});
    for (let i = 0; i < CALLS; i++) await inbox.process(received(i));
  }
  const used = process.cpuUsage(started);
  return (used.user + used.system) / CALLS;
}

async function withSdk(txboxSeesApi: boolean): Promise<number> {
  setOtelApiForTests(txboxSeesApi ? undefined : null);
  const manager = new AsyncLocalStorageContextManager().enable();
  trace.setGlobalTracerProvider(new BasicTracerProvider());
  context.setGlobalContextManager(manager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  try {
    return await trace.getTracer('bench').startActiveSpan('producer', async (span) => {
      try {
        return await time();
      } finally {
        span.end();
      }
    });
  } finally {
    trace.disable();
    context.disable();
    propagation.disable();
  }
}

log(`tracing cost benchmark: ${CALLS} calls of one event per case and round, ${ROUNDS} round(s), node ${process.version}`);
for (const w of ['enqueue', 'process'] as const) {
  work = w;
  await time(); // warm-up
  const cases = { none: [] as number[], api: [] as number[], blind: [] as number[], sdk: [] as number[] };
  const rows: string[][] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    setOtelApiForTests(null);
    cases.none.push(await time());
    setOtelApiForTests(undefined);
    cases.api.push(await time());
    cases.blind.push(await withSdk(false));
    cases.sdk.push(await withSdk(true));
    rows.push([String(round), ...[cases.none, cases.api, cases.blind, cases.sdk].map((c) => c.at(-1)!.toFixed(2))]);
  }
  const [none, api, blind, sdk] = [median(cases.none), median(cases.api), median(cases.blind), median(cases.sdk)];
  rows.push(['median', ...[none, api, blind, sdk].map((x) => x.toFixed(2))]);
  log(w === 'enqueue' ? 'outbox.enqueue (SDK cases: a span active)' : 'inbox.process, group commit off (SDK cases: a process span per event)');
  printTable(['round', 'no API (CPU µs/event)', 'API, no SDK', 'SDK, txbox blind', 'SDK'], rows);
  const plus = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(2)} µs (${x >= 0 ? '+' : ''}${((x / none) * 100).toFixed(0)}%)`;
  summary(`tracing-cost ${w}`, `${none.toFixed(2)} CPU µs per event without the API; API without SDK ${plus(api - none)}; SDK ${plus(sdk - none)}, of which txbox's tracing ${plus(sdk - blind)}`);
}
