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
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutbox } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, OrderPlaced, orderEvent } from './lib.ts';

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
const now = (): number => performance.timeOrigin + performance.now();
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
const commits: [string, number][] = [];
const transactions = Math.ceil((config.rate * config.seconds) / config.perTx);
const interval = (1000 * config.perTx) / config.rate;
let next = 0;
const started = performance.now();
await Promise.all(
  clients.map(async (c) => {
    for (;;) {
      const t = next++;
      if (t >= transactions) return;
      const wait = started + t * interval - performance.now();
      if (wait > 1) await sleep(wait);
      const events = Array.from({ length: config.perTx }, (_, j) => orderEvent(t * config.perTx + j, (t * config.perTx + j) % config.keys));
      await c.query('BEGIN');
      const ids = await outbox.enqueue(c, events);
      await c.query('COMMIT');
      const at = now();
      for (const id of ids) commits.push([id, at]);
    }
  }),
);
const ms = performance.now() - started;
await Promise.all(clients.map((c) => c.end()));
process.send?.({ type: 'done', commits, ms } satisfies ProducerMessage, () => process.exit(0));
