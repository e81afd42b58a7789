/**
 * Shared pieces of the benchmarks: settings from the environment, a fresh
 * schema per benchmark, the event and payload, fast backlog loading, raw SQL
 * drains and printing. Benchmarks print figures; they never assert timings.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { createOutbox, defineEvent, payloadType, uuidv7, type InboxStore, type NewEvent, type Outbox, type OutboxEvent, type PublishOutcome, type RelayStore, type Transport } from 'txbox';
import { migratePostgres, pgConnection, postgresNames, PostgresOutboxStore, type PostgresConnection, type PostgresNames } from 'txbox/postgres';

export const DATABASE_URL = process.env.BENCH_DATABASE_URL ?? process.env.TXBOX_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** An integer setting from the environment (`BENCH_EVENTS=20000`), or the default. */
export function envInt(name: string, fallback: number, min = 1): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw.replace(/_/g, ''));
  if (!Number.isSafeInteger(n) || n < min) throw new Error(`${name} must be an integer of at least ${min}, got ${raw}`);
  return n;
}

/** A comma-separated integer list from the environment (`BENCH_BATCH_SIZES=200,500`), or the default. */
export function envList(name: string, fallback: readonly number[], min = 1): number[] {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return [...fallback];
  return raw.split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isSafeInteger(n) || n < min) throw new Error(`${name} must be a list of integers of at least ${min}, got ${raw}`);
    return n;
  });
}

export interface OrderPayload {
  readonly orderId: string;
  readonly customerId: string;
  readonly currency: string;
  readonly total: number;
  readonly lines: readonly { readonly sku: string; readonly qty: number; readonly price: number }[];
  readonly shipTo: { readonly country: string; readonly city: string; readonly postcode: string; readonly street: string };
}

export const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<OrderPayload>() });

/** A realistic order payload of about 300 bytes of JSON. */
export function orderPayload(i: number, customer: number): OrderPayload {
  const sku = (n: number): string => `SKU-${String((i * 7 + n * 131) % 100000).padStart(6, '0')}`;
  return {
    orderId: `ord-${String(i).padStart(10, '0')}`,
    customerId: `cust-${String(customer).padStart(6, '0')}`,
    currency: 'EUR',
    total: 1999 * 2 + 4500 + 899 * 3,
    lines: [
      { sku: sku(1), qty: 2, price: 1999 },
      { sku: sku(2), qty: 1, price: 4500 },
      { sku: sku(3), qty: 3, price: 899 },
    ],
    shipTo: { country: 'DE', city: 'Berlin', postcode: '10115', street: 'Invalidenstrasse 117, Hinterhaus 3. OG' },
  };
}

/** One event of aggregate `customer` (its key is `Order:c<customer>`). */
export function orderEvent(i: number, customer: number): NewEvent<OrderPayload, 'OrderPlaced'> {
  return OrderPlaced({ aggregateId: `c${customer}`, payload: orderPayload(i, customer), headers: { 'content-type': 'application/json' } });
}

/**
 * The ten parameters of the outbox store's one-event INSERT (`insertEventsSql(names, notify, false, true)`)
 * for the event `orderEvent(i, customer)` makes, built without txbox's `enqueue`: the producer
 * benchmarks' diagnostic of what the outbox row costs by itself. A UUIDv7 id, as `enqueue` gives.
 */
export function outboxRowParams(i: number, customer: number): unknown[] {
  return [uuidv7(), 'OrderPlaced', 'Order', `c${customer}`, `Order:c${customer}`, 'orders', JSON.stringify(orderPayload(i, customer)),
    '{"content-type":"application/json"}', new Date().toISOString(), null];
}

/** A transport whose every publish acks at once: measures the relay and the database, not a broker. */
export class NoopTransport implements Transport {
  readonly name = 'noop';
  published = 0;
  calls = 0;
  constructor(private readonly onPublish?: (events: readonly OutboxEvent[]) => void) {}

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    this.calls++;
    this.published += events.length;
    this.onPublish?.(events);
    return events.map(() => OK);
  }

  async close(): Promise<void> {}
}
const OK: PublishOutcome = Object.freeze({ ok: true });

/** Wraps a transport to record when each event's publish was acked, by `clock` (default `performance.now()`). */
export function recordAcks(inner: Transport, acked: Map<string, number>, clock: () => number = () => performance.now()): Transport {
  return {
    name: inner.name,
    start: (signal) => inner.start?.(signal) ?? Promise.resolve(),
    close: () => inner.close(),
    async publish(events, signal): Promise<PublishOutcome[]> {
      const outcomes = await inner.publish(events, signal);
      const now = clock();
      outcomes.forEach((o, i) => o.ok && acked.set(events[i]!.id, now));
      return outcomes;
    },
  };
}

export interface Bench {
  readonly schema: string;
  readonly names: PostgresNames;
  readonly pool: pg.Pool;
  readonly connection: PostgresConnection;
  sql<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<R[]>;
  /** Closes the pool and drops the schema. */
  drop(): Promise<void>;
}

/** A fresh, migrated schema with a random name. Call `drop()` in a finally block. */
export async function openBench(prefix: string, poolSize = 8): Promise<Bench> {
  const schema = `bench_${prefix}_${randomBytes(4).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: poolSize });
  const connection = pgConnection({ pool });
  const names = postgresNames({ schema });
  await migratePostgres(connection, names);
  let dropped = false;
  return {
    schema,
    names,
    pool,
    connection,
    sql: async <R>(text: string, params?: unknown[]) => (await pool.query(text, params)).rows as R[],
    async drop() {
      if (dropped) return;
      dropped = true;
      await connection.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/** Runs `main(bench)` on a fresh schema and always drops it, also on Ctrl-C. */
export async function withBench(prefix: string, main: (bench: Bench) => Promise<void>, poolSize = 8): Promise<void> {
  const bench = await openBench(prefix, poolSize);
  log(`${prefix}: ${new Date().toISOString()}, ${machine()}, node ${process.version}`);
  const onSignal = (): void => {
    bench.drop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await main(bench);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await bench.drop();
    log(`${prefix} done: ${machine()}`);
  }
}

/** The benchmarks' outbox. BENCH_NOTIFY_INTERVAL_MS sets the store's `notifyIntervalMs` (default: the store's). */
export function benchOutbox(bench: Bench, notify: boolean): Outbox {
  const interval = process.env.BENCH_NOTIFY_INTERVAL_MS;
  const notifyIntervalMs = interval === undefined || interval === '' ? undefined : Number(interval);
  return createOutbox({
    store: new PostgresOutboxStore({ schema: bench.schema, notify, ...(notifyIntervalMs === undefined ? {} : { notifyIntervalMs }) }),
    events: [OrderPlaced],
  });
}

/** Empties the outbox, frees every bucket and forgets relays, so that each run starts alike. */
export async function resetOutbox(bench: Bench): Promise<void> {
  const n = bench.names;
  await bench.sql(`TRUNCATE ${n.outbox}`);
  await bench.sql(`UPDATE ${n.buckets} SET owner = NULL, lease_until = NULL`);
  await bench.sql(`DELETE FROM ${n.relays}`);
}

/**
 * Loads `events` events over `keys` keys with big multi-event enqueue
 * transactions (not timed by the benchmarks), then VACUUM ANALYZE and
 * CHECKPOINT so that every drain starts from the same state.
 */
export async function loadBacklog(bench: Bench, events: number, keys: number, perTx = 5000, loaders = 2): Promise<number> {
  const outbox = benchOutbox(bench, false);
  const started = performance.now();
  let next = 0;
  const loader = async (): Promise<void> => {
    for (;;) {
      const from = next;
      if (from >= events) return;
      next = Math.min(events, from + perTx);
      const list: NewEvent<OrderPayload, 'OrderPlaced'>[] = [];
      for (let i = from; i < next; i++) list.push(orderEvent(i, i % keys));
      await bench.connection.transaction((tx) => outbox.enqueue(tx, list));
    }
  };
  await Promise.all(Array.from({ length: loaders }, loader));
  const ms = performance.now() - started;
  await settle(bench);
  return ms;
}

/** Every column a relay reads or writes, except the generated `bucket`. */
const COPY_COLUMNS = `seq, id, type, aggregate_type, aggregate_id, key, destination, payload, headers, occurred_at, version, created_at, state,
  attempts, next_attempt_at, last_error, parked_at, done_at, replay_id`;

/**
 * A backlog loaded once through `enqueue` and kept in a side table, so that
 * each measured drain starts from the very same rows without re-running the
 * (slower) enqueue path: `restore(n)` empties the outbox and copies the first
 * `n` events back, then VACUUM ANALYZE and CHECKPOINT. Not timed.
 */
export class Backlog {
  private constructor(
    private readonly bench: Bench,
    readonly events: number,
    readonly keys: number,
    readonly loadMs: number,
  ) {}

  static async create(bench: Bench, events: number, keys: number): Promise<Backlog> {
    await resetOutbox(bench);
    const ms = await loadBacklog(bench, events, keys);
    await bench.sql(`CREATE TABLE "${bench.schema}".backlog AS SELECT ${COPY_COLUMNS} FROM ${bench.names.outbox} ORDER BY seq`);
    log(`loaded ${fmtInt(events)} events over ${keys} keys through enqueue in ${(ms / 1000).toFixed(1)} s (${fmtInt(perSec(events, ms))}/s, not timed); kept as the backlog of every run`);
    return new Backlog(bench, events, keys, ms);
  }

  async restore(events = this.events): Promise<void> {
    await resetOutbox(this.bench);
    await this.bench.sql(
      `INSERT INTO ${this.bench.names.outbox} (${COPY_COLUMNS}) OVERRIDING SYSTEM VALUE
       SELECT ${COPY_COLUMNS} FROM "${this.bench.schema}".backlog ORDER BY seq LIMIT $1`,
      [Math.min(events, this.events)],
    );
    await settle(this.bench);
  }
}

/** VACUUM ANALYZE the outbox and CHECKPOINT, so that earlier work's cleanup does not land in the next measurement. */
export async function settle(bench: Bench): Promise<void> {
  await bench.sql(`VACUUM (ANALYZE) ${bench.names.outbox}`);
  await bench.sql('CHECKPOINT');
}

export async function countByState(bench: Bench): Promise<Record<string, number>> {
  const rows = await bench.sql<{ state: string; n: number }>(`SELECT state, count(*)::int AS n FROM ${bench.names.outbox} GROUP BY state`);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

export type RawKind = 'delete' | 'update';

/**
 * The raw SQL drain limit: a loop of batched claim-and-delete (or claim-and-mark)
 * statements that also return the rows, with no relay, no lease and no per-key check.
 * `workers` loops run at once on their own connections.
 */
export async function rawDrain(bench: Bench, kind: RawKind, batch: number, workers: number): Promise<{ ms: number; rows: number }> {
  const o = bench.names.outbox;
  const pick = `SELECT seq FROM ${o} WHERE state = 'pending' ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`;
  const text =
    kind === 'delete'
      ? `DELETE FROM ${o} WHERE seq IN (${pick}) RETURNING *`
      : `UPDATE ${o} SET state = 'published', done_at = now(), attempts = attempts + 1 WHERE seq IN (${pick}) RETURNING *`;
  const clients = await Promise.all(Array.from({ length: workers }, () => bench.pool.connect()));
  let rows = 0;
  const started = performance.now();
  try {
    await Promise.all(
      clients.map(async (c) => {
        for (;;) {
          const r = await c.query(text, [batch]);
          rows += r.rowCount ?? 0;
          if ((r.rowCount ?? 0) === 0) return;
        }
      }),
    );
    return { ms: performance.now() - started, rows };
  } finally {
    for (const c of clients) c.release();
  }
}

/** Samples this process's RSS (and heap) every `everyMs` until stopped. */
export class MemorySampler {
  maxRss = 0;
  maxHeapUsed = 0;
  readonly #timer: NodeJS.Timeout;
  constructor(everyMs = 100) {
    this.sample();
    this.#timer = setInterval(() => this.sample(), everyMs);
    this.#timer.unref();
  }
  sample(): void {
    const m = process.memoryUsage();
    if (m.rss > this.maxRss) this.maxRss = m.rss;
    if (m.heapUsed > this.maxHeapUsed) this.maxHeapUsed = m.heapUsed;
  }
  stop(): void {
    clearInterval(this.#timer);
    this.sample();
  }
}

/**
 * The bare outboxes' mark (bench/bare-outbox-process.ts, bench/wal.ts's ceiling, bench/complete-statement.ts):
 * the rows `$1` (bigint[]) still pending, marked published, with no fence, held rows or failures.
 */
export function bareMarkSql(outbox: string): string {
  return `UPDATE ${outbox} SET state = 'published', done_at = now(), attempts = attempts + 1 WHERE seq = ANY($1::bigint[]) AND state = 'pending'`;
}

export const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(1);
export const perSec = (n: number, ms: number): number => (ms > 0 ? (n * 1000) / ms : 0);
export const fmtInt = (n: number): string => Math.round(n).toLocaleString('en-US');
export const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;

/** Percentile of an ascending-sorted array (nearest rank). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}

/** Prints a left-aligned text table. */
export function printTable(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  console.log(line(header));
  console.log(line(widths.map((w) => '-'.repeat(w))));
  for (const r of rows) console.log(line(r));
}

/** One line that scripts/bench.sh collects into its summary. */
export function summary(bench: string, text: string): void {
  console.log(`SUMMARY ${bench}: ${text}`);
}

/** CPU count and load average: the machine is shared, so every benchmark prints it at start and end. */
export function machine(): string {
  const [one, five] = loadavg();
  return `${availableParallelism()} CPUs, load average 1 min ${one!.toFixed(2)}, 5 min ${five!.toFixed(2)}`;
}

/** Customers in the producer benchmarks' business tables; a transaction bumps a random one. */
export const CUSTOMERS = 1000;

/**
 * The producer benchmarks' business tables in the bench schema: `customers`
 * (CUSTOMERS counter rows), `orders`, and `plain_events`, a primary-key-only
 * jsonb table for the "what does any extra insert cost" diagnostic.
 */
export async function createBusinessTables(bench: Bench): Promise<void> {
  const s = `"${bench.schema}"`;
  await bench.sql(`CREATE TABLE ${s}.customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0, spent bigint NOT NULL DEFAULT 0)`);
  await bench.sql(`INSERT INTO ${s}.customers (id) SELECT generate_series(0, ${CUSTOMERS - 1})`);
  await bench.sql(
    `CREATE TABLE ${s}.orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer_id int NOT NULL, total bigint NOT NULL,
       status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  await bench.sql(`CREATE TABLE ${s}.plain_events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL)`);
}

/**
 * CPU time (user + system, ms) used so far by every process named `postgres`
 * on this machine, from /proc; undefined where there is no /proc. Only
 * meaningful when PostgreSQL runs on the benchmark's machine, as here. Read it
 * before closing the connections whose work it should count: a backend that
 * exited is no longer in /proc (its time moves to the postmaster's children
 * total, which this does not read).
 */
export function postgresCpuMs(): number | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return undefined;
  }
  let ms = 0;
  for (const pid of pids) ms += processCpuMs(Number(pid), 'postgres') ?? 0;
  return ms;
}

/**
 * CPU time (user + system, ms) of one process from /proc/<pid>/stat, or
 * undefined if it is gone (or is not named `name`, when given).
 */
export function processCpuMs(pid: number, name?: string): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // exited meanwhile, or no /proc
  }
  if (name !== undefined && !stat.includes(` (${name}) `)) return undefined;
  // Fields after "(comm) ": state is the 1st, utime the 12th, stime the 13th (proc(5)); clock ticks of 10 ms.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * CPU time (ms) of the PostgreSQL backends serving connections whose
 * `application_name` is `applicationName`, by backend pid: take it before and
 * after a run (connections still open) and subtract with `backendCpuDelta`.
 * Unlike `postgresCpuMs`, other clients' load on a shared server is left out.
 */
export async function backendCpuMs(bench: Bench, applicationName: string): Promise<Map<number, number>> {
  const rows = await bench.sql<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [applicationName]);
  const cpu = new Map<number, number>();
  for (const { pid } of rows) {
    const ms = processCpuMs(pid);
    if (ms !== undefined) cpu.set(pid, ms);
  }
  return cpu;
}

/** ms of CPU the backends in `after` used since `before` (a backend new since `before` counts from 0). */
export function backendCpuDelta(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): number {
  let ms = 0;
  for (const [pid, total] of after) ms += total - (before.get(pid) ?? 0);
  return ms;
}

/** The 1-minute load average now (what /proc/loadavg says), to print next to a figure: `load 6.6`. */
export function load(): string {
  return `load ${loadavg()[0]!.toFixed(1)}`;
}

/** Claims a relay store answered, and how many came back empty (an idle relay polling), since `reset()`. */
export interface ClaimCounts {
  claims: number;
  empty: number;
  reset(): void;
}

/**
 * `store` with its `claim` counted (every other member is the store's own,
 * bound to it, so optional hooks such as `wakeups` keep working): empty claims
 * per second are what a polling relay costs the database while idle.
 */
export function countClaims<S extends RelayStore>(store: S): { store: S; counts: ClaimCounts } {
  const counts: ClaimCounts = {
    claims: 0,
    empty: 0,
    reset() {
      counts.claims = 0;
      counts.empty = 0;
    },
  };
  const claim: RelayStore['claim'] = async (leases, options) => {
    const events = await store.claim(leases, options);
    counts.claims++;
    if (events.length === 0) counts.empty++;
    return events;
  };
  const proxy = new Proxy(store, {
    get(target, prop) {
      if (prop === 'claim') return claim;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: proxy, counts };
}

/**
 * Producers paced to `rate` commits per second in total over `seconds`, on
 * `clients` concurrent loops; `commit(t)` runs transaction number `t` and
 * resolves with the ids it committed, once the commit returned. Producers
 * that fall behind stop starting transactions at 1.25 x `seconds` (the
 * achieved rate then shows it). Returns each id's commit time
 * (`performance.now()`) and how long producing took.
 */
export async function pacedCommits(
  o: { readonly rate: number; readonly seconds: number; readonly clients: number },
  commit: (t: number, client: number) => Promise<readonly string[]>,
): Promise<{ committedAt: Map<string, number>; ms: number }> {
  const committedAt = new Map<string, number>();
  const transactions = Math.round(o.rate * o.seconds);
  const interval = 1000 / o.rate;
  let next = 0;
  const started = performance.now();
  const stopAt = started + o.seconds * 1250;
  await Promise.all(
    Array.from({ length: o.clients }, async (_, client) => {
      for (;;) {
        const t = next++;
        if (t >= transactions || performance.now() > stopAt) return;
        const wait = started + t * interval - performance.now();
        if (wait > 1) await new Promise((r) => setTimeout(r, wait));
        const ids = await commit(t, client);
        const at = performance.now();
        for (const id of ids) committedAt.set(id, at);
      }
    }),
  );
  return { committedAt, ms: performance.now() - started };
}

export interface LatencyFigures {
  readonly produced: number;
  readonly acked: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

/** Commit-to-ack latencies (ms) of the committed ids that were acked. */
export function latencyFigures(committedAt: ReadonlyMap<string, number>, ackedAt: ReadonlyMap<string, number>): LatencyFigures {
  const xs: number[] = [];
  for (const [id, t] of committedAt) {
    const a = ackedAt.get(id);
    if (a !== undefined) xs.push(a - t);
  }
  xs.sort((a, b) => a - b);
  return { produced: committedAt.size, acked: xs.length, p50: percentile(xs, 50), p90: percentile(xs, 90), p99: percentile(xs, 99), max: xs[xs.length - 1] ?? Number.NaN };
}

/** Resolves once `done()` is true (checked every `everyMs`), or false after `timeoutMs`. */
export async function waitUntil(done: () => boolean, timeoutMs: number, everyMs = 10): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (!done()) {
    if (performance.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return true;
}

export function log(text: string): void {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${text}`);
}

/**
 * An inbox store without a database, for a consumer's own ceiling: dedup in a
 * Set, handlers given a transaction that does nothing.
 */
export function memoryInboxStore(): InboxStore {
  const seen = new Set<string>();
  // Answers applyVersioned's statement as a first write would.
  const tx = { query: async () => ({ rows: [{ stored: null, written: 1 }], rowCount: 1 }) };
  return {
    async runBatch(consumer, events, handler) {
      const ran: boolean[] = [];
      for (const event of events) {
        const id = `${consumer}/${event.id}`;
        if (seen.has(id)) {
          ran.push(false);
          continue;
        }
        await handler(tx as never, event);
        seen.add(id);
        ran.push(true);
      }
      return { ran, heldKeys: [] };
    },
    recordFailure: async () => ({ attempts: 1, dead: false }),
    hold: async () => {},
    recheckHeld: async () => [],
    redrivable: async () => [],
  };
}

/**
 * Publishes `events` OrderPlaced events over `keys` keys straight through a
 * transport, in calls of `batch` (the relay's shape: one event per key per call
 * when batch <= keys), `concurrency` calls at a time (default 1, the relay's
 * lanes), and returns the rate and each call's duration in ms (in the order
 * the calls ended). Starts and closes the transport; `timeStart` counts the
 * start in the rate (a fresh process connecting, as a relay's drain does). A
 * failed outcome throws.
 */
export async function timePublishCalls(
  transport: Transport,
  shape: { readonly events: number; readonly batch: number; readonly keys: number; readonly payload: unknown; readonly concurrency?: number; readonly timeStart?: boolean },
): Promise<{ rate: number; calls: number[] }> {
  const beforeStart = performance.now();
  await transport.start?.(AbortSignal.timeout(60_000));
  const calls: number[] = [];
  const started = shape.timeStart ? beforeStart : performance.now();
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < shape.events) {
      const from = next;
      next = Math.min(shape.events, from + shape.batch);
      const events: OutboxEvent[] = [];
      for (let i = from; i < next; i++) {
        const k = String(i % shape.keys);
        events.push({ id: uuidv7(), type: 'OrderPlaced', aggregateType: 'Order', aggregateId: k, key: `Order:${k}`, destination: 'orders', payload: shape.payload, headers: {}, occurredAt: new Date(), version: null });
      }
      const t = performance.now();
      const outcomes = await transport.publish(events, AbortSignal.timeout(60_000));
      calls.push(performance.now() - t);
      const failed = outcomes.find((o) => !o.ok);
      if (failed && !failed.ok) throw failed.error;
    }
  };
  await Promise.all(Array.from({ length: shape.concurrency ?? 1 }, lane));
  const rate = (shape.events / (performance.now() - started)) * 1000;
  await transport.close?.();
  return { rate, calls };
}
