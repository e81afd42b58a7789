/**
 * The WAL stream's memory while one large transaction into a published table
 * arrives: a table of its own (seq, key, payload) and its publication, one
 * `INSERT ... SELECT` of BENCH_ROWS rows, read by `openWalStream` with its
 * default bound (MAX_ROWS_PER_COMMIT rows kept per transaction) and without
 * one (every row's key and seq kept until the Commit, as before 29 Nov 2026),
 * alternating, a fresh process per arm so that each starts from the same
 * baseline. Prints, per arm, RSS at the start and its peak while streaming,
 * the heap + external peak, the insert's time and how long after it the
 * Commit reached the stream, and the process's CPU meanwhile.
 *
 *   node --conditions=txbox-source --import tsx bench/wal-large-commit.ts
 *
 * Settings: BENCH_ROWS (1000000), BENCH_ROUNDS (2).
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { openWalStream } from '../src/stores/postgres/pg-wal-stream.ts';
import { DATABASE_URL, envInt, log, mb, summary } from './lib.ts';

const ROWS = envInt('BENCH_ROWS', 1_000_000);
const ROUNDS = envInt('BENCH_ROUNDS', 2);

interface Arm {
  readonly arm: 'bounded' | 'unbounded';
  readonly keys: number | null;
  readonly insertMs: number;
  readonly heardMs: number;
  readonly rssStart: number;
  readonly rssPeak: number;
  readonly heapExtPeak: number;
  /** This process's CPU from the insert's start to the Commit, ms. */
  readonly cpuMs: number;
}

async function measure(arm: Arm['arm']): Promise<Arm> {
  const client = new pg.Client(DATABASE_URL);
  await client.connect();
  const table = `bench_walbig_${process.pid}`;
  await client.query(`CREATE TABLE ${table} (seq bigserial PRIMARY KEY, key text NOT NULL, payload text)`);
  await client.query(`CREATE PUBLICATION ${table} FOR TABLE ${table} WITH (publish = 'insert')`);
  try {
    let heard: { keys: number | null; at: number } | undefined;
    let rssPeak = 0;
    let heapExtPeak = 0;
    const sample = (): void => {
      const m = process.memoryUsage();
      rssPeak = Math.max(rssPeak, m.rss);
      heapExtPeak = Math.max(heapExtPeak, m.heapUsed + m.external);
    };
    const sampler = setInterval(sample, 20);
    const rssStart = process.memoryUsage().rss;
    const stream = await openWalStream({
      client: { connectionString: DATABASE_URL },
      slot: table,
      publication: table,
      ...(arm === 'unbounded' ? { maxRowsPerCommit: Number.POSITIVE_INFINITY } : {}),
      onCommit: (c) => {
        sample();
        heard = { keys: c.keys?.length ?? null, at: performance.now() };
      },
      onEnd: () => {},
    });
    try {
      const t0 = performance.now();
      const cpu0 = process.cpuUsage();
      await client.query(`INSERT INTO ${table} (key, payload) SELECT 'customer-' || (g % 1000), 'x' FROM generate_series(1, ${ROWS}) g`);
      const inserted = performance.now();
      while (heard === undefined) await new Promise((r) => setTimeout(r, 20));
      clearInterval(sampler);
      const cpu = process.cpuUsage(cpu0);
      return { arm, keys: heard.keys, insertMs: inserted - t0, heardMs: heard.at - inserted, rssStart, rssPeak, heapExtPeak, cpuMs: (cpu.user + cpu.system) / 1000 };
    } finally {
      clearInterval(sampler);
      await stream.close();
    }
  } finally {
    await client.query(`DROP PUBLICATION IF EXISTS ${table}`);
    await client.query(`DROP TABLE IF EXISTS ${table}`);
    await client.end();
  }
}

if (process.env.BENCH_WAL_LARGE_ARM) {
  process.send!(await measure(process.env.BENCH_WAL_LARGE_ARM as Arm['arm']), () => process.disconnect());
} else {
  log(`wal-large-commit: one transaction of ${ROWS.toLocaleString('en-US')} rows, ${ROUNDS} round(s), a fresh process per arm`);
  const results: Arm[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const arm of round % 2 === 0 ? (['bounded', 'unbounded'] as const) : (['unbounded', 'bounded'] as const)) {
      const child = fork(fileURLToPath(import.meta.url), { env: { ...process.env, BENCH_WAL_LARGE_ARM: arm }, execArgv: process.execArgv });
      let answer: Arm | undefined;
      child.once('message', (m) => (answer = m as Arm));
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      if (answer === undefined) throw new Error(`${arm}: the child exited with ${code} before answering`);
      const r = answer;
      results.push(r);
      log(
        `round ${round + 1} ${arm}: keys handed over ${r.keys === null ? 'none (every lane wakes)' : r.keys.toLocaleString('en-US')}; RSS ${mb(r.rssStart)} -> peak ${mb(r.rssPeak)} MB; heap + external peak ${mb(r.heapExtPeak)} MB; insert ${Math.round(r.insertMs)} ms, Commit heard ${Math.round(r.heardMs)} ms after it; this process's CPU ${Math.round(r.cpuMs)} ms`,
      );
    }
  }
  for (const arm of ['bounded', 'unbounded'] as const) {
    const rs = results.filter((r) => r.arm === arm);
    summary('wal-large-commit', `${arm}: RSS peak ${rs.map((r) => mb(r.rssPeak)).join(' / ')} MB (start ${rs.map((r) => mb(r.rssStart)).join(' / ')}) for one transaction of ${ROWS.toLocaleString('en-US')} rows`);
  }
}
