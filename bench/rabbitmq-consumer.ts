/**
 * RabbitMQ consumer benchmark: how fast one RabbitMqConsumer process drains
 * a pre-loaded queue into an inbox on PostgreSQL, with one version-guarded
 * projection upsert (`applyVersioned`) per event in the inbox transaction.
 *
 *   node --conditions=txbox-source --import tsx bench/rabbitmq-consumer.ts
 *
 * MESSAGES persistent messages over KEYS keys (versions 1, 2, ... per key)
 * are published to a durable queue first (not timed). Then, per prefetch
 * value, a consumer starts on the full queue and the clock runs until the
 * last message settled. Printed per mode: events/s, the handler-commit
 * latency (from handing the event to the inbox until its transaction
 * committed: `durationMs` of the `settled` event), the receipt-to-commit
 * latency (including the wait for the key and a handler slot), and the
 * consumer process's CPU per event. The first mode runs the same events
 * through the inbox without a broker (KeyedDispatcher + inbox.process), the
 * database's limit for this work measured in the same run.
 *
 * Settings (environment): BENCH_RC_MESSAGES (20000), BENCH_RC_KEYS (200),
 * BENCH_RC_PREFETCH (64,256), BENCH_RC_POOL (database connections, 16),
 * BENCH_RC_ROUNDS (1), BENCH_RC_BASELINE (1; 0 skips the no-broker mode),
 * BENCH_RC_BATCH and BENCH_RC_BATCH_CONCURRENCY (the inbox's group commit,
 * `batch.maxSize` and `batch.concurrency`; default: the inbox's defaults),
 * BENCH_RABBITMQ_URL (amqp://guest:guest@127.0.0.1:5672).
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'amqplib';
import { KeyedDispatcher, createInbox, uuidv7, type Inbox, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, applyVersioned, inboxNames, migrateInbox } from 'txbox/postgres';
import { RabbitMqConsumer, encodeRabbitMqMessage } from 'txbox/rabbitmq';
import { envInt, envList, fmtInt, log, machine, orderPayload, percentile, perSec, printTable, summary, withBench, type Bench, type OrderPayload } from './lib.ts';

const MESSAGES = envInt('BENCH_RC_MESSAGES', 20_000);
const KEYS = envInt('BENCH_RC_KEYS', 200);
const PREFETCH = envList('BENCH_RC_PREFETCH', [64, 256]);
const POOL = envInt('BENCH_RC_POOL', 16);
const ROUNDS = envInt('BENCH_RC_ROUNDS', 1);
const BASELINE = process.env.BENCH_RC_BASELINE !== '0';
const BATCH = {
  ...(process.env.BENCH_RC_BATCH ? { maxSize: envInt('BENCH_RC_BATCH', 64) } : {}),
  ...(process.env.BENCH_RC_BATCH_CONCURRENCY ? { concurrency: envInt('BENCH_RC_BATCH_CONCURRENCY', 2) } : {}),
};
const URL = process.env.BENCH_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const QUEUE = `txbox_bench_rc_${randomBytes(3).toString('hex')}`;

interface Result {
  readonly mode: string;
  readonly perSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly waitP50: number;
  readonly waitP99: number;
  readonly cpuUsPerEvent: number;
}

/** MESSAGES events, round robin over KEYS keys, so each key's versions are spread through the queue. */
function makeEvents(): OutboxEvent<OrderPayload>[] {
  const occurredAt = new Date();
  return Array.from({ length: MESSAGES }, (_, i) => {
    const k = i % KEYS;
    return {
      id: uuidv7(),
      type: 'OrderPlaced',
      aggregateType: 'Order',
      aggregateId: `c${k}`,
      key: `Order:c${k}`,
      destination: QUEUE,
      payload: orderPayload(i, k),
      headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
      occurredAt,
      version: Math.floor(i / KEYS) + 1,
    };
  });
}

function benchInbox(bench: Bench): Inbox {
  const inbox = createInbox({ store: new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), consumer: 'bench', batch: BATCH });
  inbox.on('OrderPlaced', async (event, tx) => {
    const p = event.payload as OrderPayload;
    await applyVersioned(tx, {
      table: `${bench.schema}.order_view`,
      id: { order_id: event.aggregateId },
      version: event.version!,
      values: { customer_id: p.customerId, total: p.total, lines: p.lines.length },
    });
  });
  return inbox;
}

async function reset(bench: Bench): Promise<void> {
  await bench.sql(`TRUNCATE "${bench.schema}".inbox, "${bench.schema}".order_view`);
  await bench.sql(`VACUUM ANALYZE "${bench.schema}".inbox`);
}

async function verify(bench: Bench): Promise<void> {
  const [row] = await bench.sql<{ rows: number; min: number; max: number }>(`SELECT count(*)::int AS rows, min(version) AS min, max(version) AS max FROM "${bench.schema}".order_view`);
  const [inbox] = await bench.sql<{ n: number }>(`SELECT count(*)::int AS n FROM "${bench.schema}".inbox WHERE status = 'processed'`);
  const last = Math.ceil(MESSAGES / KEYS);
  if (row?.rows !== Math.min(KEYS, MESSAGES) || row.max !== last || inbox?.n !== MESSAGES) {
    log(`  WARNING: projection ${JSON.stringify(row)}, inbox processed ${inbox?.n}; expected ${KEYS} rows at version ${last} and ${MESSAGES} processed`);
  }
}

function result(mode: string, ms: number, cpuUs: number, durations: number[], waits: number[]): Result {
  durations.sort((a, b) => a - b);
  waits.sort((a, b) => a - b);
  return {
    mode,
    perSec: perSec(MESSAGES, ms),
    p50: percentile(durations, 50),
    p99: percentile(durations, 99),
    waitP50: percentile(waits, 50),
    waitP99: percentile(waits, 99),
    cpuUsPerEvent: cpuUs / MESSAGES,
  };
}

/** The database's limit: the same events through the inbox, KeyedDispatcher-ordered, no broker. */
async function inboxOnly(bench: Bench, events: readonly OutboxEvent[], concurrency: number): Promise<Result> {
  await reset(bench);
  const inbox = benchInbox(bench);
  const dispatcher = new KeyedDispatcher(concurrency);
  const durations: number[] = [];
  const waits: number[] = [];
  const cpu = process.cpuUsage();
  const started = performance.now();
  // Fed like a prefetch window: at most `concurrency` x 2 events queued at once.
  let queued = 0;
  let room: (() => void) | null = null;
  for (const e of events) {
    if (queued >= concurrency * 2) await new Promise<void>((resolve) => (room = resolve));
    queued++;
    const receivedAt = performance.now();
    void dispatcher.push(e.key, async () => {
      const t = performance.now();
      await inbox.process(e);
      const now = performance.now();
      durations.push(now - t);
      waits.push(now - receivedAt);
      queued--;
      const wake = room;
      room = null;
      wake?.();
    });
  }
  await dispatcher.onIdle();
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  await verify(bench);
  return result(`inbox only, no broker, concurrency ${concurrency}`, ms, used.user + used.system, durations, waits);
}

async function load(events: readonly OutboxEvent[]): Promise<void> {
  const model = await connect(URL);
  try {
    const ch = await model.createConfirmChannel();
    await ch.assertQueue(QUEUE, { durable: true });
    const started = performance.now();
    // One channel routes in publish order, so each key's versions enter the queue in order; confirms are awaited per window.
    for (let start = 0; start < events.length; start += 500) {
      await Promise.all(
        events.slice(start, start + 500).map((e) => {
          const { content, properties } = encodeRabbitMqMessage(e);
          return new Promise<void>((resolve, reject) => ch.sendToQueue(QUEUE, content, properties, (err: unknown) => (err ? reject(err as Error) : resolve())));
        }),
      );
    }
    log(`  loaded ${fmtInt(events.length)} messages in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    await ch.close();
  } finally {
    await model.close();
  }
}

async function viaConsumer(bench: Bench, events: readonly OutboxEvent[], prefetch: number): Promise<Result> {
  await reset(bench);
  await load(events);
  const inbox = benchInbox(bench);
  const consumer = new RabbitMqConsumer({ url: URL, queues: [QUEUE], inbox, prefetch });
  const durations: number[] = [];
  const waits: number[] = [];
  let settled = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  consumer.events.on('settled', (s) => {
    durations.push(s.durationMs);
    waits.push(s.waitedMs);
    if (s.status !== 'processed') log(`  WARNING: ${s.status} ${s.id}`);
    if (++settled === MESSAGES) done();
  });
  const cpu = process.cpuUsage();
  const started = performance.now();
  await consumer.start();
  await finished;
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  await consumer.stop();
  await verify(bench);
  return result(`RabbitMqConsumer, prefetch ${prefetch}`, ms, used.user + used.system, durations, waits);
}

await withBench(
  'rabbitmq_consumer',
  async (bench) => {
    await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
    await bench.sql(`CREATE TABLE "${bench.schema}".order_view (order_id text PRIMARY KEY, version int NOT NULL, customer_id text, total int, lines int)`);
    log(`${fmtInt(MESSAGES)} events over ${fmtInt(KEYS)} keys, ${POOL} database connections, one projection upsert per event, inbox batch ${JSON.stringify(BATCH)}`);
    const events = makeEvents();
    const runs: Result[][] = [];
    try {
      for (let r = 0; r < ROUNDS; r++) {
        const round: Result[] = BASELINE ? [await inboxOnly(bench, events, PREFETCH[0]!)] : [];
        if (BASELINE) log(`${round[0]!.mode}: ${fmtInt(round[0]!.perSec)} events/s`);
        for (const p of PREFETCH) {
          round.push(await viaConsumer(bench, events, p));
          log(`${round.at(-1)!.mode}: ${fmtInt(round.at(-1)!.perSec)} events/s (${machine()})`);
        }
        runs.push(round);
      }
    } finally {
      const model = await connect(URL);
      await (await model.createChannel()).deleteQueue(QUEUE).catch(() => {});
      await model.close();
    }
    const best = runs[0]!.map((_, i) => runs.map((round) => round[i]!).sort((a, b) => b.perSec - a.perSec)[0]!);
    const ms = (x: number): string => x.toFixed(1);
    console.log(`\nRabbitMQ consumer into the inbox + applyVersioned, ${fmtInt(MESSAGES)} events, ${fmtInt(KEYS)} keys (best of ${ROUNDS}):`);
    printTable(
      ['mode', 'events/s', 'commit p50 ms', 'commit p99 ms', 'receipt-to-commit p50 ms', 'p99 ms', 'CPU µs/event'],
      best.map((b) => [b.mode, fmtInt(b.perSec), ms(b.p50), ms(b.p99), ms(b.waitP50), ms(b.waitP99), fmtInt(b.cpuUsPerEvent)]),
    );
    summary('rabbitmq-consumer', best.map((b) => `${b.mode} ${fmtInt(b.perSec)}/s p50 ${ms(b.p50)} ms p99 ${ms(b.p99)} ms`).join('; '));
  },
  POOL,
);
