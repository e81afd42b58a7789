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
 * The postgres.js modes run the same transaction through postgres.js
 * (`sql.begin`, statements prepared as postgres.js does by default), awaited
 * one statement after the other like pg, or pipelined: INSERT, UPDATE and
 * enqueue (`fromPostgresJs`) started together and sent in one round trip.
 * Their slowdown is taken against the business-only mode of the same driver
 * and style (the order id in the pipelined event comes from the client, as
 * the INSERT's RETURNING is not back yet when the event is built).
 * `pjs-pipelined-no-notify` is what producers of the WAL wake mode send
 * (`notify: false`); `pjs-pipelined-plain-insert` is the ceiling: the same
 * payload pipelined into a primary-key-only jsonb table, what one more row
 * costs the transaction without txbox.
 *
 * Each mode also prints the CPU time per transaction of this process (the
 * producers), of the PostgreSQL backends of its connections (found by
 * application_name, read from /proc before the connections close), and of
 * all PostgreSQL processes (a relay's backends and, on a shared server,
 * other clients' load included), and the CPU-bound slowdown: what the
 * producers' plus backends' added CPU alone costs when the cores are
 * saturated, steadier than the rate on a loaded machine. The summary prints
 * each target next to its figure: <= 10% pipelined, <= 15% awaited, and for
 * `notify: false` (WAL wake mode) no drop against `notify: true` (>= -5%).
 * bench/producer-pgbench.ts runs the same transaction from PostgreSQL's own C client.
 *
 * Settings: BENCH_SECONDS (10 per mode and round), BENCH_CLIENTS (4), BENCH_ROUNDS (3),
 * BENCH_MODES (comma list of mode names; default all but the pjs-pipelined-outbox-sql and pjs-pipelined-no-notify-no-*
 * diagnostics, which run only when named), BENCH_EVENTS_PER_TX (1: events per enqueue call,
 * one call per transaction).
 */
import pg from 'pg';
import postgres from 'postgres';
import { fromPostgresJs, type Outbox } from 'txbox';
import { backendCpuDelta, backendCpuMs, benchOutbox, createBusinessTables, CUSTOMERS, DATABASE_URL, envInt, fmtInt, log, median, orderEvent, orderPayload, outboxRowParams, percentile, postgresCpuMs, printTable, resetOutbox, summary, withBench, type Bench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';
import { insertEventsSql } from '../src/stores/postgres/postgres-sql.ts';

/** A whole number with its sign: +12, -3. */
const signed = (n: number): string => `${n >= 0 ? '+' : ''}${fmtInt(n)}`;
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
  readonly extra?: 'roundtrip' | 'plain-insert' | 'outbox-sql';
  /** The client: node-postgres (default) or postgres.js, awaited statement by statement or pipelined. */
  readonly driver?: 'postgres.js' | 'postgres.js pipelined';
  /** The business-only mode its slowdown is taken against. Default: business. */
  readonly base?: string;
  /** Diagnostics: the outbox index (suffix of the table name) dropped for this mode's runs, to weigh what it costs producers. */
  readonly withoutIndex?: string;
  /** Runs only when BENCH_MODES names it (diagnostics kept out of the default run's time). */
  readonly onlyWhenNamed?: boolean;
}

const ALL_MODES: readonly Mode[] = [
  { name: 'business', what: '(a) business transaction only' },
  { name: 'notify', notify: true, what: '(b) + enqueue, notify: true, nobody listening' },
  { name: 'no-notify', notify: false, what: '(c) + enqueue, notify: false' },
  { name: 'no-notify-no-open-key-idx', notify: false, withoutIndex: '_open_key_idx', what: 'diagnostic: (c) without the index of open rows by key (migration 008)' },
  { name: 'notify+listener', notify: true, listener: true, what: '(b) with an idle LISTEN connection (no relay)' },
  { name: 'notify+relay', notify: true, relay: true, what: '(b) with a LISTENing relay draining to no-op' },
  { name: 'no-notify+relay', notify: false, relay: true, what: '(c) with a polling relay draining to no-op' },
  { name: 'roundtrip', extra: 'roundtrip', what: 'diagnostic: (a) + one SELECT 1 round trip' },
  { name: 'plain-insert', extra: 'plain-insert', what: 'diagnostic: (a) + INSERT of the payload into a jsonb table with only a PK' },
  { name: 'pjs-business', driver: 'postgres.js', what: '(d) business only, postgres.js, each statement awaited' },
  { name: 'pjs-notify', driver: 'postgres.js', notify: true, base: 'pjs-business', what: '(d) + enqueue (fromPostgresJs) awaited, notify: true' },
  { name: 'pjs-pipelined-business', driver: 'postgres.js pipelined', what: '(e) business only, postgres.js, INSERT and UPDATE pipelined' },
  { name: 'pjs-pipelined-notify', driver: 'postgres.js pipelined', notify: true, base: 'pjs-pipelined-business', what: '(e) + enqueue pipelined with them, notify: true' },
  { name: 'pjs-pipelined-no-notify', driver: 'postgres.js pipelined', notify: false, base: 'pjs-pipelined-business', what: '(e) + enqueue pipelined, notify: false (producers of the WAL wake mode)' },
  {
    name: 'pjs-pipelined-plain-insert',
    driver: 'postgres.js pipelined',
    extra: 'plain-insert',
    base: 'pjs-pipelined-business',
    what: 'diagnostic (the ceiling): (e) + pipelined INSERT of the same payload into a jsonb table with only a PK',
  },
  {
    name: 'pjs-pipelined-outbox-sql',
    onlyWhenNamed: true,
    driver: 'postgres.js pipelined',
    extra: 'outbox-sql',
    base: 'pjs-pipelined-business',
    what: "diagnostic: (e) + the store's one-event INSERT (notify: false) sent by hand, its ten parameters built inline: the outbox row without txbox's code",
  },
  {
    name: 'pjs-pipelined-no-notify-no-open-key-idx',
    onlyWhenNamed: true,
    driver: 'postgres.js pipelined',
    notify: false,
    withoutIndex: '_open_key_idx',
    base: 'pjs-pipelined-business',
    what: 'diagnostic: pjs-pipelined-no-notify without the index of open rows by key',
  },
  {
    name: 'pjs-pipelined-no-notify-no-claim-idx',
    onlyWhenNamed: true,
    driver: 'postgres.js pipelined',
    notify: false,
    withoutIndex: '_claim_idx',
    base: 'pjs-pipelined-business',
    what: 'diagnostic: pjs-pipelined-no-notify without the claim index',
  },
];
/** The issue's slowdown target for a mode: 10% pipelined, 15% awaited; none for diagnostics (`extra`). */
function targetOf(mode: Mode): number | undefined {
  if (mode.extra) return undefined;
  return mode.driver === 'postgres.js pipelined' ? 10 : 15;
}

const wanted = process.env.BENCH_MODES?.split(',').map((s) => s.trim());
const MODES = wanted ? ALL_MODES.filter((m) => wanted.includes(m.name)) : ALL_MODES.filter((m) => !m.onlyWhenNamed);

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
  /** CPU per transaction of this process (the producers), in µs. */
  readonly clientUs: number;
  /** CPU per transaction of the PostgreSQL backends of the producers' connections, in µs. */
  readonly backendUs: number | undefined;
  /** CPU per transaction of all PostgreSQL processes (a relay's backends and other clients' load included), in µs. */
  readonly postgresUs: number | undefined;
}

/** The application_name of the producers' connections, to find their backends. */
const APPLICATION_NAME = `txbox-bench-producer-${process.pid}`;

/** A postgres.js client with its CLIENTS connections open (so that their backends exist before the run). */
async function openPostgresJs(): Promise<postgres.Sql> {
  const sql = postgres(DATABASE_URL, { max: CLIENTS, onnotice: () => {}, connection: { application_name: APPLICATION_NAME } });
  const reserved = await Promise.all(Array.from({ length: CLIENTS }, () => sql.reserve()));
  for (const r of reserved) r.release();
  return sql;
}

/** The postgres.js loops of a mode: CLIENTS transactions at a time until the deadline. */
async function runPostgresJs(
  sql: postgres.Sql,
  mode: Mode,
  outbox: Outbox | undefined,
  run: { insertOrder: string; bumpCustomer: string; plainInsert: string; outboxInsert: string; deadline: number; latencies: number[] },
): Promise<{ count: number }> {
  const pipelined = mode.driver === 'postgres.js pipelined';
  let count = 0;
  let localOrder = 0;
  {
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (performance.now() < run.deadline) {
          const t = performance.now();
          const customer = Math.floor(Math.random() * CUSTOMERS);
          const total = 1000 + Math.floor(Math.random() * 9000);
          if (pipelined) {
            const orderId = ++localOrder;
            await sql.begin((tx) => [
              tx.unsafe(run.insertOrder, [customer, total], { prepare: true }),
              tx.unsafe(run.bumpCustomer, [customer, total], { prepare: true }),
              ...(outbox ? [outbox.enqueue(fromPostgresJs(tx), orderEvent(orderId, customer))] : []),
              // postgres.js serializes the object as the server types the parameter (jsonb), as a user's code would.
              ...(mode.extra === 'plain-insert' ? [tx.unsafe(run.plainInsert, [orderPayload(orderId, customer) as never], { prepare: true })] : []),
              ...(mode.extra === 'outbox-sql'
                ? [tx.unsafe(run.outboxInsert, outboxRowParams(orderId, customer) as never[], { prepare: true })]
                : []),
            ]);
          } else {
            await sql.begin(async (tx) => {
              const rows = await tx.unsafe<{ id: string }[]>(run.insertOrder, [customer, total], { prepare: true });
              await tx.unsafe(run.bumpCustomer, [customer, total], { prepare: true });
              if (outbox) await outbox.enqueue(fromPostgresJs(tx), orderEvent(Number(rows[0]!.id), customer));
              else if (mode.extra === 'plain-insert') await tx.unsafe(run.plainInsert, [orderPayload(Number(rows[0]!.id), customer) as never], { prepare: true });
            });
          }
          run.latencies.push(performance.now() - t);
          count++;
        }
      }),
    );
  }
  return { count };
}

async function runMode(bench: Bench, mode: Mode): Promise<RunResult> {
  if (mode.withoutIndex === undefined) return runModeAsIs(bench, mode);
  const index = `"${bench.schema}"."${bench.names.table}${mode.withoutIndex}"`;
  const [row] = await bench.sql<{ def: string }>(`SELECT pg_get_indexdef($1::regclass) AS def`, [index]);
  const def = row!.def;
  await bench.sql(`DROP INDEX ${index}`);
  try {
    return await runModeAsIs(bench, mode);
  } finally {
    await bench.sql(def);
  }
}

async function runModeAsIs(bench: Bench, mode: Mode): Promise<RunResult> {
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
  const sql = mode.driver ? await openPostgresJs() : undefined;
  const clients = mode.driver ? [] : await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL, application_name: APPLICATION_NAME });
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
  const backendsBefore = await backendCpuMs(bench, APPLICATION_NAME);
  const cpuBefore = process.cpuUsage();
  const pgBefore = postgresCpuMs();
  const started = performance.now();
  if (sql) {
    const r = await runPostgresJs(sql, mode, outbox, { insertOrder, bumpCustomer, plainInsert, outboxInsert: insertEventsSql(bench.names, false, false, true), deadline, latencies });
    count = r.count;
  }
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
  // Read before closing: a backend that exited is gone from /proc.
  const pgAfter = postgresCpuMs();
  const backendsAfter = await backendCpuMs(bench, APPLICATION_NAME);
  await Promise.all(clients.map((c) => c.end()));
  await sql?.end();
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
    backendUs: backendsAfter.size === 0 ? undefined : (backendCpuDelta(backendsBefore, backendsAfter) * 1000) / count,
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
      const cpu = `CPU per tx: producers ${fmtInt(r.clientUs)} µs, their backends ${r.backendUs === undefined ? '?' : fmtInt(r.backendUs)} µs, all PostgreSQL ${r.postgresUs === undefined ? '?' : fmtInt(r.postgresUs)} µs`;
      log(`round ${round} ${mode.name}: ${fmtInt(r.txPerSec)} tx/s, latency p50 ${r.p50.toFixed(2)} ms p99 ${r.p99.toFixed(2)} ms, ${cpu} ${extra.join(', ')}`);
    }
  }
  console.log(`\nMedian of ${ROUNDS} round(s), ${CLIENTS} connections; slowdown = 1 - mode / business-only (same driver and style) of the same round.`);
  console.log('CPU per tx: this process (the producers), the backends of its connections, all PostgreSQL processes (other clients\' load and a relay\'s backends included).');
  console.log('CPU-bound slowdown: 1 - (producers + backends CPU of the base) / (that of the mode), what the added CPU alone costs when the cores are saturated.');
  const rows: string[][] = [];
  const cpuOf = (r: RunResult): number | undefined => (r.backendUs === undefined ? undefined : r.clientUs + r.backendUs);
  const medianOf = (rs: readonly RunResult[], f: (r: RunResult) => number | undefined): number | undefined =>
    rs.every((r) => f(r) !== undefined) ? median(rs.map((r) => f(r)!)) : undefined;
  const us = (x: number | undefined): string => (x === undefined ? '?' : fmtInt(x));
  for (const mode of MODES) {
    const rs = results.get(mode.name)!;
    const baseName = mode.base ?? (mode.driver ? mode.name : 'business');
    const base = results.get(baseName);
    const tx = median(rs.map((r) => r.txPerSec));
    const slowdowns = base ? rs.map((r, i) => 1 - r.txPerSec / base[i]!.txPerSec) : [];
    const slow = median(slowdowns);
    const isBase = mode.name === baseName || !base;
    const slowText = isBase ? '' : `${(slow * 100).toFixed(1)}% (${slowdowns.map((x) => (x * 100).toFixed(0)).join(' / ')})`;
    const cpu = medianOf(rs, cpuOf);
    const baseCpu = base ? medianOf(base, cpuOf) : undefined;
    const cpuSlow = isBase || cpu === undefined || baseCpu === undefined ? undefined : 1 - baseCpu / cpu;
    rows.push([
      mode.name,
      mode.what,
      fmtInt(tx),
      rs.map((r) => fmtInt(r.txPerSec)).join(' / '),
      slowText,
      median(rs.map((r) => r.p50)).toFixed(2),
      median(rs.map((r) => r.p99)).toFixed(2),
      us(medianOf(rs, (r) => r.clientUs)),
      us(medianOf(rs, (r) => r.backendUs)),
      us(medianOf(rs, (r) => r.postgresUs)),
      isBase || cpu === undefined || baseCpu === undefined ? '' : `${signed(cpu - baseCpu)} µs (${(cpuSlow! * 100).toFixed(1)}%)`,
      isBase ? '' : targetOf(mode) === undefined ? 'diagnostic' : `<= ${targetOf(mode)}%`,
    ]);
    if (!isBase) {
      const target = targetOf(mode);
      const cpuText = cpuSlow === undefined ? '' : `; CPU-bound slowdown ${(cpuSlow * 100).toFixed(1)}% (${signed(cpu! - baseCpu!)} µs of producers + backends CPU per tx)`;
      summary(
        'producer',
        `${mode.name}: median ${fmtInt(tx)} tx/s, median slowdown ${(slow * 100).toFixed(1)}% vs ${baseName} (median ${fmtInt(median(base!.map((r) => r.txPerSec)))} tx/s)${cpuText} ${target === undefined ? '(diagnostic, no target)' : `(target <= ${target}%)`}`,
      );
    }
  }
  // WAL wake mode: producers drop NOTIFY; their throughput must not drop (within 5% of notify: true).
  for (const [without, withNotify] of [['no-notify', 'notify'], ['pjs-pipelined-no-notify', 'pjs-pipelined-notify']] as const) {
    const a = results.get(without);
    const b = results.get(withNotify);
    if (!a || !b) continue;
    const change = median(a.map((r, i) => r.txPerSec / b[i]!.txPerSec - 1));
    summary('producer', `${without} vs ${withNotify}: median ${change >= 0 ? '+' : ''}${(change * 100).toFixed(1)}% tx/s per round (target: no drop, >= -5%)`);
  }
  // The ceiling: what one more row costs, measured in the same run; enqueue's cost beyond it is txbox's own.
  for (const [enqueueMode, ceilingMode] of [['notify', 'plain-insert'], ['no-notify', 'plain-insert'], ['pjs-pipelined-notify', 'pjs-pipelined-plain-insert'], ['pjs-pipelined-no-notify', 'pjs-pipelined-plain-insert']] as const) {
    const e = results.get(enqueueMode);
    const c = results.get(ceilingMode);
    if (!e || !c) continue;
    const beyond = median(e.map((r, i) => 1 - r.txPerSec / c[i]!.txPerSec));
    summary('producer', `${enqueueMode} vs ${ceilingMode} (a bare insert of the same payload): median ${(beyond * 100).toFixed(1)}% slower per round`);
  }
  printTable(
    ['mode', 'what', 'tx/s (median)', 'per round', 'slowdown vs base, median (per round)', 'p50 ms', 'p99 ms', 'producers CPU µs/tx', 'their backends CPU µs/tx', 'all PostgreSQL CPU µs/tx', 'CPU vs base (CPU-bound slowdown)', 'target'],
    rows,
  );
});
