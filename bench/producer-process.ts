/**
 * The latency benchmarks' producers in a process of their own, as the
 * application would be: `clients` connections commit single-event (or
 * `perTx`-event) transactions at `rate` events/s in total for `seconds`, and
 * report each event's commit time on the wall clock with sub-millisecond
 * precision (`performance.timeOrigin + performance.now()`, comparable across
 * processes on one machine). Started by bench/commit-to-ack.ts with `fork`
 * (`producersInChild`), so that the relay under test does not share its event
 * loop with the producers.
 */
import pg from 'pg';
import { createOutbox } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, OrderPlaced, orderEvent, pacedCommits } from './lib.ts';

export interface ProducerConfig {
  readonly schema: string;
  readonly rate: number;
  readonly seconds: number;
  readonly clients: number;
  readonly keys: number;
  readonly perTx: number;
  readonly notify: boolean;
}

export type ProducerMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'done'; readonly commits: readonly (readonly [string, number])[]; readonly ms: number };

const config = JSON.parse(process.env.BENCH_PRODUCER ?? '{}') as ProducerConfig;
const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: config.schema, notify: config.notify }), events: [OrderPlaced] });
const clients = await Promise.all(
  Array.from({ length: config.clients }, async () => {
    const c = new pg.Client({ connectionString: DATABASE_URL });
    await c.connect();
    return c;
  }),
);
process.send?.({ type: 'ready' } satisfies ProducerMessage);
await new Promise<void>((resolve) => process.once('message', () => resolve()));
const { committedAt, ms } = await pacedCommits({ rate: config.rate / config.perTx, seconds: config.seconds, clients: config.clients }, async (t, i) => {
  const c = clients[i]!;
  const events = Array.from({ length: config.perTx }, (_, j) => orderEvent(t * config.perTx + j, (t * config.perTx + j) % config.keys));
  await c.query('BEGIN');
  const ids = await outbox.enqueue(c, events);
  await c.query('COMMIT');
  return ids;
});
// pacedCommits takes performance.now(): on the wall clock, comparable with the relay's process.
const commits = [...committedAt].map(([id, t]) => [id, performance.timeOrigin + t] as const);
await Promise.all(clients.map((c) => c.end()));
process.send?.({ type: 'done', commits, ms } satisfies ProducerMessage, () => process.exit(0));
