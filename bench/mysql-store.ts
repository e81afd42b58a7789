/**
 * The MySQL/MariaDB store in the shapes of the PostgreSQL benchmarks, in one
 * run on a database of its own (TXBOX_BENCH_MYSQL_URL, default
 * mysql://root@127.0.0.1:3306/test; a database `txbox_bench_store_<random>`
 * is created and dropped after):
 *
 *   1. drain (bench/drain.ts): a backlog drained by one relay (in this
 *      process, no-op transport, default batch 500 and 2 lanes) against the
 *      raw limit on the same rows: loops of BEGIN; SELECT the relay's columns
 *      ... WHERE state = 'pending' AND seq > <last> ORDER BY seq LIMIT <batch>
 *      FOR UPDATE SKIP LOCKED; UPDATE ... SET state = 'published' of those
 *      seqs; COMMIT, with no lease, fence nor per-key check (the keyset
 *      `seq > last` makes it the cheapest way to walk the table). Every run
 *      starts from the same rows (loaded once through enqueue, copied back);
 *      raw and relay alternate, and each repeat's ratio is taken from runs
 *      next to each other. The relay's RSS and heap are sampled every 100 ms
 *      (this process: the bench's own baseline is printed with them).
 *   2. commit-to-publish latency (bench/latency.ts): single-event
 *      transactions paced to BENCH_RATES through a relay in this process to
 *      a no-op transport (one clock). MySQL has no NOTIFY: the relay polls,
 *      adaptively (after a busy claim it polls again within
 *      minPollIntervalMs, doubling up to pollIntervalMs while empty). Runs the
 *      defaults (1000 / 5 ms) and BENCH_SHORT_POLL_MS as pollIntervalMs, and
 *      prints what each costs in empty claims per second.
 *   3. producer overhead (bench/producer.ts): a business transaction (INSERT
 *      an order, UPDATE one of 1000 customers' counters) with and without
 *      one enqueue, and (diagnostic) with an INSERT of the same payload into
 *      a primary-key-only table instead, BENCH_CLIENTS connections, modes
 *      interleaved for BENCH_ROUNDS rounds (order reversed every other
 *      round); slowdown per round against that round's business-only run,
 *      median reported.
 *
 * The 1-minute load average is printed next to each figure: the machine is
 * shared, read the ratios within one run.
 *
 *   node --conditions=txbox-source --import tsx bench/mysql-store.ts
 *
 * Settings (environment): BENCH_PARTS (drain,latency,producer),
 * BENCH_EVENTS (20000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES (2),
 * BENCH_REPEAT (3), BENCH_RAW_WORKERS (1,2), BENCH_RATES (500,1000),
 * BENCH_LATENCY_SECONDS (8), BENCH_LATENCY_CLIENTS (32), BENCH_SHORT_POLL_MS (50),
 * BENCH_SECONDS (5 per producer mode and round), BENCH_CLIENTS (4), BENCH_ROUNDS (3).
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createOutbox, createRelay, type NewEvent } from 'txbox';
import { MysqlOutboxStore, MysqlRelayStore, migrateMysql, mysqlConnection, mysqlNames, type MysqlConnection } from 'txbox/mysql';
import {
  countClaims,
  CUSTOMERS,
  envInt,
  envList,
  fmtInt,
  latencyFigures,
  load,
  log,
  machine,
  mb,
  median,
  MemorySampler,
  NoopTransport,
  OrderPlaced,
  orderEvent,
  orderPayload,
  pacedCommits,
  pct,
  percentile,
  perSec,
  printTable,
  summary,
  waitUntil,
  type OrderPayload,
} from './lib.ts';

const URL = process.env.TXBOX_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const PARTS = (process.env.BENCH_PARTS ?? 'drain,latency,producer').split(',').map((s) => s.trim());
const EVENTS = envInt('BENCH_EVENTS', 20_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const REPEAT = envInt('BENCH_REPEAT', 3);
const RAW_WORKERS = envList('BENCH_RAW_WORKERS', [1, 2]);
const RATES = envList('BENCH_RATES', [500, 1000]);
const LATENCY_SECONDS = envInt('BENCH_LATENCY_SECONDS', 8);
const LATENCY_CLIENTS = envInt('BENCH_LATENCY_CLIENTS', 32);
const SHORT_POLL_MS = envInt('BENCH_SHORT_POLL_MS', 50);
const SECONDS = envInt('BENCH_SECONDS', 5);
const CLIENTS = envInt('BENCH_CLIENTS', 4);
const ROUNDS = envInt('BENCH_ROUNDS', 3);

const database = `txbox_bench_store_${randomBytes(4).toString('hex')}`;
const TABLE = 'sb_outbox';
const names = mysqlNames({ table: TABLE });
const q = (name: string): string => `\`${name}\``;

const root = await mysql.createConnection({ uri: URL });
await root.query(`CREATE DATABASE ${q(database)}`);
const dbUri = URL.replace(/\/[^/]*$/, `/${database}`);
const poolOptions = { uri: dbUri, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' } as const;
const pool = mysql.createPool({ ...poolOptions, connectionLimit: Math.max(16, LATENCY_CLIENTS, CLIENTS, ...RAW_WORKERS) + 4 });
const sql = async <R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<R[]> => (await pool.query(text, params))[0] as unknown as R[];
const outbox = createOutbox({ store: new MysqlOutboxStore({ table: TABLE }), events: [OrderPlaced] });

/** A relay store on a pool of its own (lanes + 2 connections), as `txbox relay` would have; closed by `close()`. */
async function relayStore(): Promise<{ store: MysqlRelayStore; connection: MysqlConnection }> {
  const connection = await mysqlConnection({ uri: dbUri, maxConnections: LANES + 2 });
  return { store: new MysqlRelayStore({ connection, table: TABLE }), connection };
}

async function resetOutbox(): Promise<void> {
  await sql(`TRUNCATE ${names.outbox}`);
  await sql(`UPDATE ${names.buckets} SET owner = NULL, lease_until = NULL`);
  await sql(`DELETE FROM ${names.relays}`);
}

// ---------------------------------------------------------------- 1. drain

/** Loads the backlog once through enqueue (not timed) and keeps a copy in `backlog`. */
async function loadBacklog(): Promise<void> {
  await resetOutbox();
  const started = performance.now();
  const perTx = 2000;
  let next = 0;
  await Promise.all(
    Array.from({ length: 2 }, async () => {
      const conn = await pool.getConnection();
      try {
        for (;;) {
          const from = next;
          if (from >= EVENTS) return;
          next = Math.min(EVENTS, from + perTx);
          const list: NewEvent<OrderPayload, 'OrderPlaced'>[] = [];
          for (let i = from; i < next; i++) list.push(orderEvent(i, i % KEYS));
          await conn.beginTransaction();
          await outbox.enqueue(conn, list);
          await conn.commit();
        }
      } finally {
        conn.release();
      }
    }),
  );
  const ms = performance.now() - started;
  await sql(`CREATE TABLE backlog AS SELECT * FROM ${names.outbox} ORDER BY seq`);
  log(`loaded ${fmtInt(EVENTS)} events over ${KEYS} keys through enqueue in ${(ms / 1000).toFixed(1)} s (${fmtInt(perSec(EVENTS, ms))}/s, transactions of 2,000 on 2 connections, not timed; ${load()}); kept as the backlog of every run`);
}

/** Empties the outbox and copies the backlog back, then ANALYZE: every drain starts from the same rows. */
async function restore(): Promise<void> {
  await resetOutbox();
  await sql(`INSERT INTO ${names.outbox} SELECT * FROM backlog ORDER BY seq`);
  await sql(`ANALYZE TABLE ${names.outbox}`);
}

/** The relay's claim columns (mysql-sql.ts EVENT_COLUMNS): the raw loop reads what a relay reads. */
const RAW_COLUMNS =
  "seq, id, type, aggregate_type, aggregate_id, `key`, bucket, destination, CONCAT('', payload) AS payload, CONCAT('', headers) AS headers, " +
  "DATE_FORMAT(occurred_at, '%Y-%m-%dT%H:%i:%s.%fZ') AS occurred_at, version, attempts, CONCAT('', routes_done) AS routes_done";

async function rawDrain(workers: number): Promise<number> {
  await restore();
  const conns = await Promise.all(Array.from({ length: workers }, () => pool.getConnection()));
  let rows = 0;
  const started = performance.now();
  try {
    await Promise.all(
      conns.map(async (c) => {
        let last = 0;
        for (;;) {
          await c.beginTransaction();
          const [picked] = (await c.query(
            `SELECT ${RAW_COLUMNS} FROM ${names.outbox} WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`,
            [last, BATCH],
          )) as unknown as [{ seq: string }[]];
          if (picked.length === 0) {
            await c.commit();
            return;
          }
          const seqs = picked.map((r) => r.seq);
          await c.query(`UPDATE ${names.outbox} SET state = 'published', done_at = UTC_TIMESTAMP(6), attempts = attempts + 1 WHERE seq IN (?)`, [seqs]);
          await c.commit();
          rows += picked.length;
          last = Number(seqs[seqs.length - 1]);
        }
      }),
    );
  } finally {
    for (const c of conns) c.release();
  }
  const ms = performance.now() - started;
  const rate = perSec(rows, ms);
  log(`raw SELECT ... FOR UPDATE SKIP LOCKED + UPDATE, batch ${BATCH}, ${workers} connection(s): ${fmtInt(rows)} rows in ${(ms / 1000).toFixed(2)} s = ${fmtInt(rate)} rows/s (${load()})`);
  return rate;
}

interface DrainRun {
  readonly rate: number;
  readonly rssBase: number;
  readonly rssMax: number;
  readonly heapMax: number;
  readonly load: string;
}

async function relayDrain(): Promise<DrainRun> {
  await restore();
  const { store, connection } = await relayStore();
  const transport = new NoopTransport();
  const errors: string[] = [];
  const memory = new MemorySampler(100);
  const rssBase = memory.maxRss;
  const relay = createRelay({ store, transport, batchSize: BATCH, lanes: LANES, retention: false, metrics: false });
  relay.on('error', (e) => errors.push(`${e.phase}: ${e.error.message}`));
  const started = performance.now();
  await relay.start();
  const done = await waitUntil(() => transport.published >= EVENTS, 300_000);
  const ms = performance.now() - started;
  memory.stop();
  await relay.stop();
  await connection.close();
  const states = await sql<{ state: string; n: string }>(`SELECT state, count(*) AS n FROM ${names.outbox} GROUP BY state`);
  const rate = perSec(transport.published, ms);
  const l = load();
  log(
    `relay no-op, batch ${BATCH}, lanes ${LANES}: ${fmtInt(transport.published)} in ${(ms / 1000).toFixed(2)} s = ${fmtInt(rate)} events/s${done ? '' : ' (TIMED OUT)'}; ` +
      `RSS ${mb(rssBase)} MB at start, max ${mb(memory.maxRss)} MB, max heap used ${mb(memory.maxHeapUsed)} MB; rows ${JSON.stringify(Object.fromEntries(states.map((s) => [s.state, Number(s.n)])))} (${l})`,
  );
  if (errors.length > 0) log(`  relay errors: ${errors.slice(0, 5).join(' | ')}`);
  return { rate, rssBase, rssMax: memory.maxRss, heapMax: memory.maxHeapUsed, load: l };
}

async function drainPart(): Promise<void> {
  log(`drain: ${fmtInt(EVENTS)} events over ${KEYS} keys, ~300-byte payloads, batch ${BATCH}, lanes ${LANES}, ${REPEAT} repeat(s)`);
  await loadBacklog();
  const reps: { raw: number; relay: DrainRun }[] = [];
  for (let rep = 1; rep <= REPEAT; rep++) {
    log(`--- repeat ${rep}/${REPEAT}`);
    const raws: number[] = [];
    raws.push(await rawDrain(RAW_WORKERS[0]!));
    const relay = await relayDrain();
    for (const w of RAW_WORKERS.slice(1)) raws.push(await rawDrain(w));
    reps.push({ raw: Math.max(...raws), relay });
  }
  console.log(`\nRelay (no-op transport) against the raw limit (best of ${RAW_WORKERS.join('/')} connections), per repeat:`);
  printTable(
    ['repeat', 'relay ev/s', 'raw rows/s', 'relay / raw', 'RSS start MB', 'max RSS MB', 'max heap MB', 'load'],
    reps.map((r, i) => [String(i + 1), fmtInt(r.relay.rate), fmtInt(r.raw), pct(r.relay.rate / r.raw), mb(r.relay.rssBase), mb(r.relay.rssMax), mb(r.relay.heapMax), r.relay.load]),
  );
  summary('mysql-store', `drain: relay median ${fmtInt(median(reps.map((r) => r.relay.rate)))}/s, raw median ${fmtInt(median(reps.map((r) => r.raw)))} rows/s, median ratio ${pct(median(reps.map((r) => r.relay.rate / r.raw)))}; max RSS ${mb(Math.max(...reps.map((r) => r.relay.rssMax)))} MB (${load()})`);
}

// ---------------------------------------------------------------- 2. latency

async function latencyRun(rate: number, pollIntervalMs: number, label: string): Promise<string[]> {
  await resetOutbox();
  const ackedAt = new Map<string, number>();
  const transport = new NoopTransport((events) => {
    const now = performance.now();
    for (const e of events) if (!ackedAt.has(e.id)) ackedAt.set(e.id, now);
  });
  const { store, connection } = await relayStore();
  const counted = countClaims(store);
  const relay = createRelay({ store: counted.store, transport, pollIntervalMs, retention: false, metrics: false });
  await relay.start();
  // Idle first (the relay's wait has grown to pollIntervalMs): the claims of an idle second are what polling costs.
  await new Promise((r) => setTimeout(r, 2000));
  counted.counts.reset();
  await new Promise((r) => setTimeout(r, 2000));
  const idleEmptyPerSec = counted.counts.empty / 2;
  counted.counts.reset();
  const conns = await Promise.all(Array.from({ length: LATENCY_CLIENTS }, () => pool.getConnection()));
  const { committedAt, ms } = await pacedCommits({ rate, seconds: LATENCY_SECONDS, clients: LATENCY_CLIENTS }, async (t, client) => {
    const c = conns[client]!;
    await c.beginTransaction();
    const ids = await outbox.enqueue(c, orderEvent(t, t % KEYS));
    await c.commit();
    return ids;
  });
  const busy = { claims: counted.counts.claims, empty: counted.counts.empty };
  for (const c of conns) c.release();
  await waitUntil(() => ackedAt.size >= committedAt.size, 30_000);
  await relay.stop();
  await connection.close();
  const f = latencyFigures(committedAt, ackedAt);
  const achieved = perSec(f.produced, ms);
  const l = load();
  const emptyPerSec = perSec(busy.empty, ms);
  log(
    `${label}: ${fmtInt(f.acked)}/${fmtInt(f.produced)} acked at ${fmtInt(achieved)}/s, p50 ${f.p50.toFixed(1)} ms, p90 ${f.p90.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms, max ${f.max.toFixed(1)} ms; ` +
      `claims ${fmtInt(perSec(busy.claims, ms))}/s of which empty ${fmtInt(emptyPerSec)}/s; idle: ${idleEmptyPerSec.toFixed(1)} empty claims/s (${l})`,
  );
  summary('mysql-store', `latency ${label}: p50 ${f.p50.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms, ${fmtInt(f.acked)}/${fmtInt(f.produced)} acked; empty claims ${fmtInt(emptyPerSec)}/s under load, ${idleEmptyPerSec.toFixed(1)}/s idle (${l})`);
  return [label, fmtInt(achieved), `${fmtInt(f.acked)}/${fmtInt(f.produced)}`, f.p50.toFixed(1), f.p90.toFixed(1), f.p99.toFixed(1), f.max.toFixed(1), fmtInt(emptyPerSec), idleEmptyPerSec.toFixed(1), l];
}

async function latencyPart(): Promise<void> {
  log(`latency: ${LATENCY_SECONDS} s per scenario, ${LATENCY_CLIENTS} producer connections, single-event transactions, relay defaults (batch 500, lanes 2), no-op transport`);
  const rows: string[][] = [];
  for (const rate of RATES) {
    rows.push(await latencyRun(rate, 1000, `${rate}/s, polling 1000 ms / min 5 ms (defaults)`));
    rows.push(await latencyRun(rate, SHORT_POLL_MS, `${rate}/s, polling ${SHORT_POLL_MS} ms / min 5 ms`));
  }
  console.log('');
  printTable(['scenario', 'events/s', 'acked/produced', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'empty claims/s (loaded)', 'empty claims/s (idle)', 'load'], rows);
}

// ---------------------------------------------------------------- 3. producer

type ProducerMode = 'business' | 'enqueue' | 'plain-insert';
interface ProducerRun {
  readonly txPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly load: string;
}

async function producerRun(mode: ProducerMode): Promise<ProducerRun> {
  await sql('TRUNCATE orders');
  await sql('TRUNCATE plain_events');
  await sql('UPDATE customers SET orders = 0, spent = 0');
  await resetOutbox();
  const conns = await Promise.all(Array.from({ length: CLIENTS }, () => pool.getConnection()));
  const latencies: number[] = [];
  let count = 0;
  const started = performance.now();
  const deadline = started + SECONDS * 1000;
  await Promise.all(
    conns.map(async (c) => {
      while (performance.now() < deadline) {
        const t = performance.now();
        const customer = Math.floor(Math.random() * CUSTOMERS);
        const total = 1000 + Math.floor(Math.random() * 9000);
        await c.beginTransaction();
        const [r] = (await c.query("INSERT INTO orders (customer_id, total, status) VALUES (?, ?, 'placed')", [customer, total])) as unknown as [{ insertId: number }];
        await c.query('UPDATE customers SET orders = orders + 1, spent = spent + ? WHERE id = ?', [total, customer]);
        if (mode === 'enqueue') await outbox.enqueue(c, orderEvent(Number(r.insertId), customer));
        else if (mode === 'plain-insert') await c.query('INSERT INTO plain_events (payload) VALUES (?)', [JSON.stringify(orderPayload(Number(r.insertId), customer))]);
        await c.commit();
        latencies.push(performance.now() - t);
        count++;
      }
    }),
  );
  const ms = performance.now() - started;
  for (const c of conns) c.release();
  latencies.sort((a, b) => a - b);
  return { txPerSec: perSec(count, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99), load: load() };
}

async function producerPart(): Promise<void> {
  await sql('CREATE TABLE customers (id INT PRIMARY KEY, orders INT NOT NULL DEFAULT 0, spent BIGINT NOT NULL DEFAULT 0) ENGINE = InnoDB');
  await sql(`INSERT INTO customers (id) VALUES ${Array.from({ length: CUSTOMERS }, (_, i) => `(${i})`).join(', ')}`);
  await sql(
    "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, total BIGINT NOT NULL, status VARCHAR(20) NOT NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB",
  );
  await sql('CREATE TABLE plain_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload LONGTEXT NOT NULL CHECK (json_valid(payload))) ENGINE = InnoDB');
  const modes: readonly ProducerMode[] = ['business', 'enqueue', 'plain-insert'];
  log(`producer: ${CLIENTS} connections, ${SECONDS} s per mode and round, ${ROUNDS} round(s), modes interleaved: ${modes.join(', ')}`);
  const rounds: Record<ProducerMode, ProducerRun>[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    // Alternate the order each round so that drift on a noisy machine does not favour one mode.
    const order = round % 2 === 1 ? modes : [...modes].reverse();
    const r: Partial<Record<ProducerMode, ProducerRun>> = {};
    for (const mode of order) {
      const run = await producerRun(mode);
      r[mode] = run;
      log(`round ${round} ${mode}: ${fmtInt(run.txPerSec)} tx/s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms (${run.load})`);
    }
    rounds.push(r as Record<ProducerMode, ProducerRun>);
  }
  console.log('\nPer round: slowdown = 1 - mode / business only of the same round; plain-insert (diagnostic) adds an INSERT of the same payload into a table with only a primary key and the json_valid check, what one more row costs without txbox:');
  printTable(
    ['round', 'business tx/s', '+ enqueue tx/s', 'slowdown', '+ plain insert tx/s', 'slowdown', 'p50 ms business / enqueue / plain', 'p99 ms business / enqueue / plain', 'load'],
    rounds.map((r, i) => [
      String(i + 1),
      fmtInt(r.business.txPerSec),
      fmtInt(r.enqueue.txPerSec),
      pct(1 - r.enqueue.txPerSec / r.business.txPerSec),
      fmtInt(r['plain-insert'].txPerSec),
      pct(1 - r['plain-insert'].txPerSec / r.business.txPerSec),
      [r.business, r.enqueue, r['plain-insert']].map((x) => x.p50.toFixed(2)).join(' / '),
      [r.business, r.enqueue, r['plain-insert']].map((x) => x.p99.toFixed(2)).join(' / '),
      r.enqueue.load,
    ]),
  );
  const slow = median(rounds.map((r) => 1 - r.enqueue.txPerSec / r.business.txPerSec));
  const plain = median(rounds.map((r) => 1 - r['plain-insert'].txPerSec / r.business.txPerSec));
  summary(
    'mysql-store',
    `producer: business median ${fmtInt(median(rounds.map((r) => r.business.txPerSec)))} tx/s, + enqueue ${fmtInt(median(rounds.map((r) => r.enqueue.txPerSec)))} tx/s, median slowdown ${(slow * 100).toFixed(1)}%; + a plain insert of the same payload ${(plain * 100).toFixed(1)}% (diagnostic) (${load()})`,
  );
}

// ----------------------------------------------------------------

const onSignal = (): void => {
  void root.query(`DROP DATABASE IF EXISTS ${q(database)}`).finally(() => process.exit(130));
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);
try {
  const [server] = (await root.query('SELECT @@version AS version, @@innodb_flush_log_at_trx_commit AS flush, @@sync_binlog AS sync_binlog, @@log_bin AS log_bin')) as unknown as [
    { version: string; flush: string | number; sync_binlog: string | number; log_bin: string | number }[],
  ];
  const s = server[0]!;
  log(`mysql-store: ${new Date().toISOString()}, ${machine()}, node ${process.version}; server ${s.version}, innodb_flush_log_at_trx_commit ${s.flush}, log_bin ${s.log_bin}, sync_binlog ${s.sync_binlog}; database ${database}`);
  const connection = await mysqlConnection({ pool });
  await migrateMysql(connection, names);
  if (PARTS.includes('drain')) await drainPart();
  if (PARTS.includes('latency')) await latencyPart();
  if (PARTS.includes('producer')) await producerPart();
} finally {
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  await pool.end();
  await root.query(`DROP DATABASE IF EXISTS ${q(database)}`);
  await root.end();
  log(`mysql-store done: ${machine()}`);
}
