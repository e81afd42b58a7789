/**
 * Producer overhead: business transactions per second at BENCH_CLIENTS
 * concurrent connections, with and without an outbox event per transaction,
 * with NOTIFY on and off, with and without a LISTENing relay.
 *
 *   node --conditions=txbox-source --import tsx bench/producer.ts
 *
 * A business transaction: BEGIN; INSERT an order; UPDATE a counter row of a
 * random one of 1000 customers; [enqueue one ~300-byte event]; COMMIT.
 * Modes run interleaved for BENCH_ROUNDS rounds (order reversed every other
 * round); each round's slowdown is taken against that round's business-only
 * run, and the median over rounds is reported.
 * The relay, when present, runs in a child process and drains to a no-op transport.
 *
 * Each mode also prints the CPU time per transaction of this process (the
 * producers) and of all PostgreSQL processes (from /proc; a relay's backends
 * included where a relay runs). bench/producer-pgbench.ts runs the same
 * transaction from PostgreSQL's own C client.
 *
 * Settings: BENCH_SECONDS (10 per mode and round), BENCH_CLIENTS (4), BENCH_ROUNDS (3),
 * BENCH_MODES (comma list of mode names, default all), BENCH_EVENTS_PER_TX (1: events per enqueue call,
 * one call per transaction).
 */
import pg from 'pg';
import type { Outbox } from 'txbox';
import { benchOutbox, createBusinessTables, CUSTOMERS, DATABASE_URL, envInt, fmtInt, log, median, orderEvent, orderPayload, percentile, postgresCpuMs, printTable, resetOutbox, summary, withBench, type Bench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';

const SECONDS = envInt('BENCH_SECONDS', 10);
const CLIENTS = envInt('BENCH_CLIENTS', 4);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const EVENTS_PER_TX = envInt('BENCH_EVENTS_PER_TX', 1);

interface Mode {
  readonly name: string;
  readonly what: string;
  /** undefined: no outbox event; otherwise enqueue with this notify setting. */
  readonly notify?: boolean;
  /** A bare LISTEN connection on the outbox channel (no relay). */
  readonly listener?: boolean;
  readonly relay?: boolean;
  /** Diagnostics: what a comparable extra step costs without txbox. */
  readonly extra?: 'roundtrip' | 'plain-insert';
}

const ALL_MODES: readonly Mode[] = [
  { name: 'business', what: '(a) business transaction only' },
  { name: 'notify', notify: true, what: '(b) + enqueue, notify: true, nobody listening' },
  { name: 'no-notify', notify: false, what: '(c) + enqueue, notify: false' },
  { name: 'notify+listener', notify: true, listener: true, what: '(b) with an idle LISTEN connection (no relay)' },
  { name: 'notify+relay', notify: true, relay: true, what: '(b) with a LISTENing relay draining to no-op' },
  { name: 'no-notify+relay', notify: false, relay: true, what: '(c) with a polling relay draining to no-op' },
  { name: 'roundtrip', extra: 'roundtrip', what: 'diagnostic: (a) + one SELECT 1 round trip' },
  { name: 'plain-insert', extra: 'plain-insert', what: 'diagnostic: (a) + INSERT of the payload into a jsonb table with only a PK' },
];
const wanted = process.env.BENCH_MODES?.split(',').map((s) => s.trim());
const MODES = wanted ? ALL_MODES.filter((m) => wanted.includes(m.name)) : ALL_MODES;

async function resetAll(bench: Bench): Promise<void> {
  const s = `"${bench.schema}"`;
  await resetOutbox(bench);
  await bench.sql(`TRUNCATE ${s}.orders, ${s}.plain_events`);
  await bench.sql(`UPDATE ${s}.customers SET orders = 0, spent = 0`);
  await bench.sql(`VACUUM ${s}.customers`);
  await bench.sql(`VACUUM ${bench.names.outbox}`);
  await bench.sql('CHECKPOINT');
}

interface RunResult {
  readonly txPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly relayPublished: number | undefined;
  readonly notifications: number | undefined;
  /** CPU per transaction of this process (the producers) and of all PostgreSQL processes, in µs. */
  readonly clientUs: number;
  readonly postgresUs: number | undefined;
}

async function runMode(bench: Bench, mode: Mode): Promise<RunResult> {
  await resetAll(bench);
  const outbox: Outbox | undefined = mode.notify === undefined ? undefined : benchOutbox(bench, mode.notify);
  let listener: pg.Client | undefined;
  let notifications = 0;
  if (mode.listener) {
    listener = new pg.Client({ connectionString: DATABASE_URL });
    await listener.connect();
    listener.on('notification', () => notifications++);
    await listener.query(`LISTEN "${bench.names.channel}"`);
  }
  const relay = mode.relay
    ? startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, transport: { kind: 'noop' } })
    : undefined;
  await relay?.started;
  const clients = await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
  const s = `"${bench.schema}"`;
  const insertOrder = `INSERT INTO ${s}.orders (customer_id, total, status) VALUES ($1, $2, 'placed') RETURNING id`;
  const bumpCustomer = `UPDATE ${s}.customers SET orders = orders + 1, spent = spent + $2 WHERE id = $1`;
  const plainInsert = `INSERT INTO ${s}.plain_events (payload) VALUES ($1::jsonb)`;
  const latencies: number[] = [];
  const deadline = performance.now() + SECONDS * 1000;
  let count = 0;
  const cpuBefore = process.cpuUsage();
  const pgBefore = postgresCpuMs();
  const started = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      while (performance.now() < deadline) {
        const t = performance.now();
        const customer = Math.floor(Math.random() * CUSTOMERS);
        const total = 1000 + Math.floor(Math.random() * 9000);
        await c.query('BEGIN');
        const { rows } = await c.query<{ id: string }>(insertOrder, [customer, total]);
        await c.query(bumpCustomer, [customer, total]);
        const orderId = Number(rows[0]!.id);
        if (outbox) await outbox.enqueue(c, EVENTS_PER_TX === 1 ? orderEvent(orderId, customer) : Array.from({ length: EVENTS_PER_TX }, () => orderEvent(orderId, customer)));
        else if (mode.extra === 'roundtrip') await c.query('SELECT 1');
        else if (mode.extra === 'plain-insert') await c.query(plainInsert, [JSON.stringify(orderPayload(orderId, customer))]);
        await c.query('COMMIT');
        latencies.push(performance.now() - t);
        count++;
      }
    }),
  );
  const elapsed = performance.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  const pgAfter = postgresCpuMs();
  await Promise.all(clients.map((c) => c.end()));
  const relayResult = await relay?.stop();
  await listener?.end();
  latencies.sort((a, b) => a - b);
  return {
    txPerSec: (count * 1000) / elapsed,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    relayPublished: relayResult?.published,
    notifications: mode.listener ? notifications : undefined,
    clientUs: (cpu.user + cpu.system) / count,
    postgresUs: pgBefore === undefined || pgAfter === undefined ? undefined : ((pgAfter - pgBefore) * 1000) / count,
  };
}

await withBench('producer', async (bench) => {
  await createBusinessTables(bench);
  log(`producer benchmark: ${CLIENTS} connections, ${SECONDS} s per mode, ${ROUNDS} round(s), modes interleaved, ${EVENTS_PER_TX} event(s) per enqueue call, schema ${bench.schema}`);
  const results = new Map<string, RunResult[]>(MODES.map((m) => [m.name, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    // Alternate the order each round so that drift on a noisy machine does not favour one mode.
    const order = round % 2 === 1 ? MODES : [...MODES].reverse();
    for (const mode of order) {
      const r = await runMode(bench, mode);
      results.get(mode.name)!.push(r);
      const extra = [
        r.relayPublished === undefined ? '' : `relay published ${fmtInt(r.relayPublished)}`,
        r.notifications === undefined ? '' : `listener got ${fmtInt(r.notifications)} notifications`,
      ].filter(Boolean);
      const cpu = `CPU per tx: producers ${fmtInt(r.clientUs)} µs, PostgreSQL ${r.postgresUs === undefined ? '?' : fmtInt(r.postgresUs)} µs`;
      log(`round ${round} ${mode.name}: ${fmtInt(r.txPerSec)} tx/s, latency p50 ${r.p50.toFixed(2)} ms p99 ${r.p99.toFixed(2)} ms, ${cpu} ${extra.join(', ')}`);
    }
  }
  const base = results.get('business');
  console.log(`\nMedian of ${ROUNDS} round(s), ${CLIENTS} connections; slowdown = 1 - mode / business-only of the same round:`);
  const rows: string[][] = [];
  for (const mode of MODES) {
    const rs = results.get(mode.name)!;
    const tx = median(rs.map((r) => r.txPerSec));
    const slowdowns = base ? rs.map((r, i) => 1 - r.txPerSec / base[i]!.txPerSec) : [];
    const slow = median(slowdowns);
    const slowText = mode.name === 'business' || !base ? '' : `${(slow * 100).toFixed(1)}% (${slowdowns.map((x) => (x * 100).toFixed(0)).join(' / ')})`;
    const pgUs = rs.every((r) => r.postgresUs !== undefined) ? fmtInt(median(rs.map((r) => r.postgresUs!))) : '?';
    rows.push([
      mode.name,
      mode.what,
      fmtInt(tx),
      rs.map((r) => fmtInt(r.txPerSec)).join(' / '),
      slowText,
      median(rs.map((r) => r.p50)).toFixed(2),
      median(rs.map((r) => r.p99)).toFixed(2),
      fmtInt(median(rs.map((r) => r.clientUs))),
      pgUs,
    ]);
    if (mode.name !== 'business' && base) summary('producer', `${mode.name}: median ${fmtInt(tx)} tx/s, median slowdown ${(slow * 100).toFixed(1)}% vs business-only (median ${fmtInt(median(base.map((r) => r.txPerSec)))} tx/s) (target <= 15%)`);
  }
  printTable(['mode', 'what', 'tx/s (median)', 'per round', 'slowdown vs (a), median (per round)', 'p50 ms', 'p99 ms', 'producers CPU µs/tx', 'PostgreSQL CPU µs/tx'], rows);
});
