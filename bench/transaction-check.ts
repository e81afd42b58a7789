/**
 * What the not-in-a-transaction check of `outbox.enqueue` costs per call
 * (`notInTransaction` in src/core/executors.ts): a pg client inside BEGIN, a
 * pg Pool (refused), and a plain `{ query }` executor (trusted), against the
 * enqueue of one event without a database (bench/enqueue-cpu.ts) for scale.
 * The check reads driver state only (pg's getTransactionStatus()): no round trip.
 *
 *   node --conditions=txbox-source --import tsx bench/transaction-check.ts
 *
 * Settings: BENCH_CALLS (1000000), BENCH_ROUNDS (3), TXBOX_BENCH_DATABASE_URL.
 */
import pg from 'pg';
import { createOutbox, type SqlExecutor } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { notInTransaction } from '../src/core/executors.ts';
import { envInt, log, orderEvent, OrderPlaced, printTable, summary } from './lib.ts';

const CALLS = envInt('BENCH_CALLS', 1_000_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const URL = process.env.TXBOX_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const client = new pg.Client({ connectionString: URL });
await client.connect();
await client.query('BEGIN');
const pool = new pg.Pool({ connectionString: URL, max: 1 });
const executor: SqlExecutor = { query: async () => ({ rows: [] }) };
const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'bench', notify: false }), events: [OrderPlaced], allowAutocommit: true });

function nsPerCheck(target: object): number {
  let sink = 0;
  const started = performance.now();
  for (let i = 0; i < CALLS; i++) if (notInTransaction(target) !== undefined) sink++;
  const ns = ((performance.now() - started) * 1e6) / CALLS;
  return sink < 0 ? -1 : ns;
}

log(`transaction-check benchmark: ${CALLS} checks per case, ${ROUNDS} round(s), node ${process.version}`);
const rows: string[][] = [];
try {
  for (let round = 1; round <= ROUNDS; round++) {
    const inTx = nsPerCheck(client);
    const poolNs = nsPerCheck(pool);
    const plain = nsPerCheck(executor);
    const n = Math.min(CALLS, 100_000);
    const started = performance.now();
    for (let i = 0; i < n; i++) await outbox.enqueue(executor, orderEvent(i, i % 1000));
    const enqueueNs = ((performance.now() - started) * 1e6) / n;
    rows.push([String(round), inTx.toFixed(1), poolNs.toFixed(1), plain.toFixed(1), enqueueNs.toFixed(0), ((100 * inTx) / enqueueNs).toFixed(2)]);
  }
} finally {
  await client.query('ROLLBACK');
  await client.end();
  await pool.end();
}
printTable(['round', 'pg client in BEGIN ns', 'pg Pool ns', 'plain executor ns', 'enqueue(1) ns (no db)', 'check / enqueue %'], rows);
const last = rows.at(-1)!;
summary('transaction-check', `the check costs ${last[1]} ns on a pg client in BEGIN, ${last[5]}% of an enqueue of one event without the database`);
