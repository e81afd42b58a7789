/**
 * Producer overhead on a busy machine: the modes of bench/producer.ts cut
 * into short slices and interleaved (BENCH_SLICES slices of BENCH_SLICE_MS
 * per mode, the order rotated every slice), on the same connections, so that
 * other work on the machine falls on every mode alike. bench/producer.ts runs
 * each mode for seconds on fresh tables: its rounds drift apart by tens of
 * points when other processes share the cores; here they cannot drift apart.
 *
 *   node --conditions=txbox-source --import tsx bench/producer-interleaved.ts
 *
 * The business transaction is bench/producer.ts's: BEGIN; INSERT an order;
 * UPDATE one of 1000 customers' counter rows; [the mode's extra statement];
 * COMMIT. Modes (BENCH_MODES, comma list):
 *   pjs-pipelined-business     postgres.js, INSERT and UPDATE pipelined (sql.begin((tx) => [...]))
 *   pjs-pipelined-notify       + enqueue (fromPostgresJs) pipelined with them, notify: true
 *   pjs-pipelined-no-notify    + enqueue pipelined, notify: false (producers of the WAL wake mode)
 *   pjs-pipelined-plain-insert + the same payload pipelined into a primary-key-only jsonb table (the ceiling)
 *   pjs-pipelined-outbox-sql   + the store's one-event INSERT sent by hand (the outbox row without txbox's code)
 *   business, notify, no-notify, plain-insert: the same with node-postgres, each statement awaited
 * Default: the four postgres.js modes.
 *
 * Per mode: tx/s over all its slices, the slowdown against the business-only
 * mode of its driver, CPU per transaction of this process (the producers) and
 * of the PostgreSQL backends of its connections (/proc), and the CPU-bound
 * slowdown (1 - base CPU / mode CPU, producers + backends): where the cores
 * are saturated, as on a 2-core machine with 4 clients, that is what the
 * added CPU costs; it is the steadier figure when other load shares the
 * machine. The slowdown is also printed per quarter of the run, to show its spread.
 *
 * Settings: BENCH_SLICES (40), BENCH_SLICE_MS (500), BENCH_CLIENTS (4), BENCH_MODES.
 */
import pg from 'pg';
import postgres from 'postgres';
import { fromPostgresJs, type Outbox } from 'txbox';
import { benchOutbox, createBusinessTables, CUSTOMERS, DATABASE_URL, envInt, fmtInt, log, machine, orderEvent, orderPayload, outboxRowParams, printTable, processCpuMs, summary, withBench } from './lib.ts';
import { insertEventsSql } from '../src/stores/postgres/postgres-sql.ts';

/** A whole number with its sign: +12, -3. */
const signed = (n: number): string => `${n >= 0 ? '+' : ''}${fmtInt(n)}`;
const SLICES = envInt('BENCH_SLICES', 40);
const SLICE_MS = envInt('BENCH_SLICE_MS', 500);
const CLIENTS = envInt('BENCH_CLIENTS', 4);

type Extra = 'notify' | 'no-notify' | 'plain-insert' | 'outbox-sql' | undefined;
interface Mode {
  readonly name: string;
  readonly driver: 'pg' | 'postgres.js pipelined';
  readonly extra: Extra;
  readonly base: string;
  /** Slowdown target printed next to the figure; undefined for diagnostics. */
  readonly target: number | undefined;
}

const ALL_MODES: readonly Mode[] = [
  { name: 'pjs-pipelined-business', driver: 'postgres.js pipelined', extra: undefined, base: 'pjs-pipelined-business', target: undefined },
  { name: 'pjs-pipelined-notify', driver: 'postgres.js pipelined', extra: 'notify', base: 'pjs-pipelined-business', target: 10 },
  { name: 'pjs-pipelined-no-notify', driver: 'postgres.js pipelined', extra: 'no-notify', base: 'pjs-pipelined-business', target: 10 },
  { name: 'pjs-pipelined-plain-insert', driver: 'postgres.js pipelined', extra: 'plain-insert', base: 'pjs-pipelined-business', target: undefined },
  // The store's one-event INSERT (notify: false) sent by hand, its ten parameters built inline: the outbox row without txbox's code.
  { name: 'pjs-pipelined-outbox-sql', driver: 'postgres.js pipelined', extra: 'outbox-sql', base: 'pjs-pipelined-business', target: undefined },
  { name: 'business', driver: 'pg', extra: undefined, base: 'business', target: undefined },
  { name: 'notify', driver: 'pg', extra: 'notify', base: 'business', target: 15 },
  { name: 'no-notify', driver: 'pg', extra: 'no-notify', base: 'business', target: 15 },
  { name: 'plain-insert', driver: 'pg', extra: 'plain-insert', base: 'business', target: undefined },
];
const wanted = (process.env.BENCH_MODES ?? 'pjs-pipelined-business,pjs-pipelined-notify,pjs-pipelined-no-notify,pjs-pipelined-plain-insert').split(',').map((s) => s.trim());
const unknown = wanted.filter((w) => !ALL_MODES.some((m) => m.name === w));
if (unknown.length > 0) throw new Error(`BENCH_MODES: unknown mode(s) ${unknown.join(', ')}; known: ${ALL_MODES.map((m) => m.name).join(', ')}`);
const MODES = ALL_MODES.filter((m) => wanted.includes(m.name));
for (const m of MODES) if (!MODES.some((b) => b.name === m.base)) throw new Error(`BENCH_MODES: ${m.name} needs its base mode ${m.base} too`);

interface Totals {
  tx: number;
  ms: number;
  clientUs: number;
  backendMs: number;
  /** Per quarter of the run: tx and ms, for the spread of the slowdown. */
  readonly quarters: { tx: number; ms: number }[];
}

await withBench('producer_interleaved', async (bench) => {
  await createBusinessTables(bench);
  const applicationName = `txbox-bench-interleaved-${process.pid}`;
  const s = `"${bench.schema}"`;
  const insertOrder = `INSERT INTO ${s}.orders (customer_id, total, status) VALUES ($1, $2, 'placed') RETURNING id`;
  const bumpCustomer = `UPDATE ${s}.customers SET orders = orders + 1, spent = spent + $2 WHERE id = $1`;
  const plainInsert = `INSERT INTO ${s}.plain_events (payload) VALUES ($1::jsonb)`;
  const outboxInsert = insertEventsSql(bench.names, false, false, true);
  const outboxes: Record<'notify' | 'no-notify', Outbox> = { notify: benchOutbox(bench, true), 'no-notify': benchOutbox(bench, false) };

  const sql = postgres(DATABASE_URL, { max: CLIENTS, onnotice: () => {}, connection: { application_name: applicationName } });
  const reserved = await Promise.all(Array.from({ length: CLIENTS }, () => sql.reserve()));
  for (const r of reserved) r.release();
  const clients = await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL, application_name: applicationName });
      await c.connect();
      return c;
    }),
  );
  const pids = (await bench.sql<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [applicationName])).map((r) => r.pid);
  const backendsMs = (): number => pids.reduce((sum, pid) => sum + (processCpuMs(pid) ?? 0), 0);
  let orderId = 0;

  async function pjsLoop(mode: Mode, deadline: number): Promise<number> {
    let n = 0;
    while (performance.now() < deadline) {
      const customer = Math.floor(Math.random() * CUSTOMERS);
      const total = 1000 + Math.floor(Math.random() * 9000);
      const id = ++orderId;
      await sql.begin((tx) => {
        const statements: Promise<unknown>[] = [tx.unsafe(insertOrder, [customer, total], { prepare: true }), tx.unsafe(bumpCustomer, [customer, total], { prepare: true })];
        if (mode.extra === 'notify' || mode.extra === 'no-notify') statements.push(outboxes[mode.extra].enqueue(fromPostgresJs(tx), orderEvent(id, customer)));
        else if (mode.extra === 'plain-insert') statements.push(tx.unsafe(plainInsert, [orderPayload(id, customer) as never], { prepare: true }));
        else if (mode.extra === 'outbox-sql') statements.push(tx.unsafe(outboxInsert, outboxRowParams(id, customer) as never[], { prepare: true }));
        return statements;
      });
      n++;
    }
    return n;
  }

  async function pgLoop(c: pg.Client, mode: Mode, deadline: number): Promise<number> {
    let n = 0;
    while (performance.now() < deadline) {
      const customer = Math.floor(Math.random() * CUSTOMERS);
      const total = 1000 + Math.floor(Math.random() * 9000);
      await c.query('BEGIN');
      const { rows } = await c.query<{ id: string }>(insertOrder, [customer, total]);
      await c.query(bumpCustomer, [customer, total]);
      const id = Number(rows[0]!.id);
      if (mode.extra === 'notify' || mode.extra === 'no-notify') await outboxes[mode.extra].enqueue(c, orderEvent(id, customer));
      else if (mode.extra === 'plain-insert') await c.query(plainInsert, [JSON.stringify(orderPayload(id, customer))]);
      await c.query('COMMIT');
      n++;
    }
    return n;
  }

  async function slice(mode: Mode): Promise<{ tx: number; ms: number; clientUs: number; backendMs: number }> {
    const backendsBefore = backendsMs();
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    const deadline = started + SLICE_MS;
    const counts = await Promise.all(
      mode.driver === 'pg' ? clients.map((c) => pgLoop(c, mode, deadline)) : Array.from({ length: CLIENTS }, () => pjsLoop(mode, deadline)),
    );
    const ms = performance.now() - started;
    const cpu = process.cpuUsage(cpuBefore);
    return { tx: counts.reduce((a, b) => a + b, 0), ms, clientUs: cpu.user + cpu.system, backendMs: backendsMs() - backendsBefore };
  }

  log(`producer interleaved: ${MODES.length} modes, ${SLICES} slices of ${SLICE_MS} ms each, ${CLIENTS} connections, schema ${bench.schema}`);
  // Warm-up: one slice per mode (JIT, prepared statements, caches), not counted.
  for (const mode of MODES) await slice(mode);
  const totals = new Map<string, Totals>(MODES.map((m) => [m.name, { tx: 0, ms: 0, clientUs: 0, backendMs: 0, quarters: Array.from({ length: 4 }, () => ({ tx: 0, ms: 0 })) }]));
  for (let i = 0; i < SLICES; i++) {
    const quarter = Math.min(3, Math.floor((i * 4) / SLICES));
    for (let j = 0; j < MODES.length; j++) {
      const mode = MODES[(i + j) % MODES.length]!;
      const r = await slice(mode);
      const t = totals.get(mode.name)!;
      t.tx += r.tx;
      t.ms += r.ms;
      t.clientUs += r.clientUs;
      t.backendMs += r.backendMs;
      t.quarters[quarter]!.tx += r.tx;
      t.quarters[quarter]!.ms += r.ms;
    }
    if ((i + 1) % 10 === 0) log(`${i + 1}/${SLICES} slices, ${machine()}`);
  }
  await Promise.all(clients.map((c) => c.end()));
  await sql.end();

  const rate = (t: { tx: number; ms: number }): number => (t.tx * 1000) / t.ms;
  const cpuPerTx = (t: Totals): number => (t.clientUs + t.backendMs * 1000) / t.tx;
  const rows: string[][] = [];
  for (const mode of MODES) {
    const t = totals.get(mode.name)!;
    const b = totals.get(mode.base)!;
    const isBase = mode.name === mode.base;
    const slow = 1 - rate(t) / rate(b);
    const quarters = t.quarters.map((q, i) => (q.tx === 0 ? '?' : `${((1 - rate(q) / rate(b.quarters[i]!)) * 100).toFixed(0)}`)).join(' / ');
    const cpuSlow = 1 - cpuPerTx(b) / cpuPerTx(t);
    rows.push([
      mode.name,
      fmtInt(rate(t)),
      isBase ? '' : `${(slow * 100).toFixed(1)}% (${quarters})`,
      fmtInt(t.clientUs / t.tx),
      fmtInt((t.backendMs * 1000) / t.tx),
      isBase ? '' : `${signed(cpuPerTx(t) - cpuPerTx(b))} µs (${(cpuSlow * 100).toFixed(1)}%)`,
      isBase ? '' : mode.target === undefined ? 'diagnostic' : `<= ${mode.target}%`,
    ]);
    if (!isBase) {
      summary(
        'producer-interleaved',
        `${mode.name}: ${fmtInt(rate(t))} tx/s, ${(slow * 100).toFixed(1)}% slower than ${mode.base} (${fmtInt(rate(b))} tx/s); CPU-bound slowdown ${(cpuSlow * 100).toFixed(1)}% ` +
          `(${signed(t.clientUs / t.tx - b.clientUs / b.tx)} µs producers, ${signed((t.backendMs * 1000) / t.tx - (b.backendMs * 1000) / b.tx)} µs backends per tx) ` +
          (mode.target === undefined ? '(diagnostic, no target)' : `(target <= ${mode.target}%)`),
      );
    }
  }
  for (const [without, withNotify] of [['pjs-pipelined-no-notify', 'pjs-pipelined-notify'], ['no-notify', 'notify']] as const) {
    const a = totals.get(without);
    const b = totals.get(withNotify);
    if (a && b) summary('producer-interleaved', `${without} vs ${withNotify}: ${((rate(a) / rate(b) - 1) * 100).toFixed(1)}% tx/s (target: no drop, >= -5%)`);
  }
  console.log(`\n${SLICES} interleaved slices of ${SLICE_MS} ms per mode, ${CLIENTS} connections; ${machine()}`);
  printTable(['mode', 'tx/s', 'slowdown vs base (per quarter)', 'producers CPU µs/tx', 'backends CPU µs/tx', 'CPU vs base (CPU-bound slowdown)', 'target'], rows);
});
