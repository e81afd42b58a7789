/**
 * What `outbox.enqueue` itself costs the producer's CPU, without a database:
 * the executor answers every statement at once. Measures building the event
 * with its definition, validation, UUIDv7, payload serialization, the size
 * check and the statement's parameters, for calls of 1 and of 10 events.
 *
 *   node --conditions=txbox-source --import tsx bench/enqueue-cpu.ts
 *
 * Settings: BENCH_CALLS (200000), BENCH_ROUNDS (3).
 */
import { createOutbox, type SqlExecutor } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { envInt, log, orderEvent, OrderPlaced, printTable, summary } from './lib.ts';

const CALLS = envInt('BENCH_CALLS', 200_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);

const executor: SqlExecutor = { query: async () => ({ rows: [] }) };
const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'bench', notify: false }), events: [OrderPlaced] });

/** µs per event of `work(i)` over `calls` calls of `perCall` events each. */
async function time(calls: number, perCall: number, work: (i: number) => unknown): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < calls; i++) await work(i);
  return ((performance.now() - started) * 1000) / (calls * perCall);
}

log(`enqueue CPU benchmark: ${CALLS} calls per case, ${ROUNDS} round(s), node ${process.version}`);
const rows: string[][] = [];
for (let round = 1; round <= ROUNDS; round++) {
  const build = await time(CALLS, 1, (i) => orderEvent(i, i % 1000));
  const single = await time(CALLS, 1, (i) => outbox.enqueue(executor, orderEvent(i, i % 1000)));
  const ten = await time(CALLS / 10, 10, (i) => outbox.enqueue(executor, Array.from({ length: 10 }, (_, j) => orderEvent(i * 10 + j, j))));
  rows.push([String(round), build.toFixed(2), single.toFixed(2), (single - build).toFixed(2), ten.toFixed(2), (ten - build).toFixed(2)]);
}
printTable(['round', 'build event µs', 'build + enqueue(1) µs', 'enqueue(1) µs/event', 'build + enqueue(10) µs/event', 'enqueue(10) µs/event'], rows);
const last = rows.at(-1)!;
summary('enqueue-cpu', `enqueue of one event ${last[3]} µs, of ten events ${last[5]} µs per event, without the database`);
