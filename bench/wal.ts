/**
 * The WAL wake mode against LISTEN/NOTIFY, in one run on one database:
 * commit-to-publish latency at BENCH_RATES (500, 1000 events/s; single-event
 * transactions, relay in this process, no-op transport), producer
 * transactions/s (unpaced, BENCH_CLIENTS connections, each mode with its relay
 * running in a child process: NOTIFY producers + a LISTENing relay, against
 * producers without NOTIFY + a relay streaming its slot), and a no-op drain of
 * BENCH_EVENTS events per mode with the relay's RSS (child process).
 *
 *   node --conditions=txbox-source --import tsx bench/wal.ts
 *
 * Settings: BENCH_LATENCY_SECONDS (10, measured after BENCH_WARMUP_SECONDS, 1, whose events are reported apart), BENCH_RATES (500,1000), BENCH_PRODUCER_SECONDS (10),
 * BENCH_CLIENTS (4), BENCH_ROUNDS (2), BENCH_EVENTS (200000), BENCH_KEYS (1000), BENCH_SLOTS (1,3),
 * BENCH_DRAIN_REPEAT (2, interleaved), BENCH_SECTIONS (latency,claims,producer,slots,drain),
 * BENCH_MARKS (async; `async,sync` compares the relay store's synchronousMarks in the latency section),
 * BENCH_WHILE_MARKING (on; `on,off` compares claims while the previous batch is marked with waiting for the mark),
 * BENCH_LATENCY_ROUNDS (1), BENCH_PRODUCERS (child: the latency section's producers in a process of their own),
 * BENCH_LANES (the latency section's relay lanes; default: the relay's),
 * BENCH_DRAIN_NODE_FLAGS (`|`-separated node flag sets for the drain's relay process, each run
 * interleaved with the others, e.g. `|--max-semi-space-size=4`; default: one set, none).
 *
 * BENCH_RELAY_BUILD=dist: the drain's (and the idle) relay process is plain node over the built
 * package (bench/relay-worker-dist.mjs: no tsx, no benchmark modules), as `txbox relay` runs;
 * build first with `rm -rf dist && npx tsc -p tsconfig.build.json`. Default: src (tsx).
 *
 * The drain section also starts an idle relay process (no events, 3 s) and reports its RSS: the
 * floor of a relay process here (node, tsx, pg, txbox loaded), next to the drains' maxima.
 *
 * The cost of slots: with BENCH_SLOTS streams open on the outbox's publication (0: none, the producers' ceiling)
 * (no relay), unpaced producers for BENCH_PRODUCER_SECONDS; the walsenders' CPU
 * (from /proc) per second and per 1,000 outbox commits, and the time to create
 * a temporary slot and start streaming. Then, per rate of BENCH_RATES and per
 * BENCH_SLOTS count, how soon each stream hears a commit (one slot per relay:
 * does every relay wake at once?), producers paced in a child process.
 */
import pg from 'pg';
import { createRelay } from 'txbox';
import { readFileSync } from 'node:fs';
import { dropPublication, ensurePublication, pgConnection, PostgresRelayStore, walNames, walSlots } from 'txbox/postgres';
import { openWalStream, type WalCommit } from '../src/stores/postgres/pg-wal-stream.ts';
import { Backlog, bareMarkSql, benchOutbox, DATABASE_URL, NoopTransport, envInt, envList, fmtInt, log, mb, median, orderEvent, pacedCommits, percentile, perSec, printTable, resetOutbox, settle, summary, withBench, type Bench } from './lib.ts';
import { fmtMs, measureCommitToAck, produceInChild, splitWarmup, warmupSeconds } from './commit-to-ack.ts';
import { startRelayWorker } from './relay-process.ts';
import { StageTrace } from './wal-stages.ts';

const SECONDS = envInt('BENCH_LATENCY_SECONDS', 10);
/** BENCH_WARMUP_SECONDS (1): each latency run (relays and ceilings alike) commits this long first; those events are reported apart. */
const WARMUP = warmupSeconds();
const RATES = envList('BENCH_RATES', [500, 1000]);
const PRODUCER_SECONDS = envInt('BENCH_PRODUCER_SECONDS', 10);
const CLIENTS = envInt('BENCH_CLIENTS', 4);
const ROUNDS = envInt('BENCH_ROUNDS', 2);
const EVENTS = envInt('BENCH_EVENTS', 200_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const MODES = ['notify', 'wal'] as const;
/** BENCH_SLOTS: 0 is the producers' rate with no stream open, the ceiling of the WAL mode's producers. */
const SLOTS = envList('BENCH_SLOTS', [1, 3], 0);
const DRAIN_REPEAT = envInt('BENCH_DRAIN_REPEAT', 2);
const DRAIN_FLAGS = (process.env.BENCH_DRAIN_NODE_FLAGS ?? '').split('|').map((f) => f.split(' ').filter(Boolean));
const BUILD = process.env.BENCH_RELAY_BUILD === 'dist' ? 'dist' : 'src';
/** Issue 16's targets, printed next to the figures. */
const TARGET = { p50Ms: 1.0, p99Ms: 5, rssMb: 150 };
/** BENCH_SECTIONS: comma list of latency, claims, producer, slots, drain (default all). */
const SECTIONS = new Set((process.env.BENCH_SECTIONS ?? 'latency,claims,producer,slots,drain').split(','));
const CLAIM_EVENTS = envInt('BENCH_CLAIM_EVENTS', 200);
/** BENCH_MARKS: the relay store's marks in the latency section, `async` (the default store) and/or `sync` (synchronousMarks), alternating first per round. */
const MARKS = (process.env.BENCH_MARKS ?? 'async').split(',').filter((m): m is 'async' | 'sync' => m === 'async' || m === 'sync');
/** BENCH_WHILE_MARKING: `on` (default) lets the relay claim while its previous batch is marked (stores with claimWhileMarking), `off` hides that from it; `on,off` compares them, alternating first per round. */
const WHILE_MARKING = (process.env.BENCH_WHILE_MARKING ?? 'on').split(',').filter((m): m is 'on' | 'off' => m === 'on' || m === 'off');
/** BENCH_PRODUCERS=child: the latency section's producers run in a process of their own (bench/producer-process.ts), not beside the relay. */
const PRODUCERS_IN_CHILD = process.env.BENCH_PRODUCERS === 'child';
/** BENCH_LATENCY_ROUNDS: repeats of the latency section (default 1). */
const LATENCY_ROUNDS = envInt('BENCH_LATENCY_ROUNDS', 1);
/** BENCH_STAGES=off: the latency section's relay runs without the per-stage timing (bench/wal-stages.ts wraps its store). */
const STAGES = process.env.BENCH_STAGES !== 'off';
/** BENCH_LANES: the latency section's relay lanes (0: the relay's default). */
const LATENCY_LANES = envInt('BENCH_LANES', 0);

/** `n` pg clients of their own, connected. */
function connectClients(n: number): Promise<pg.Client[]> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      return c;
    }),
  );
}

/**
 * The ceiling of the latency section at `rate`: the same producers (8 connections, single-event
 * transactions, no NOTIFY) with no relay, and a probe connection in this process running a bare
 * primary-key SELECT of the outbox (prepared) back to back, 1 ms apart. A relay that reads the
 * table once after a commit reaches it (the WAL mode's claim by seq) publishes no sooner than such a
 * round trip after the commit, on this machine under this load; also the producers' own COMMIT
 * round trip, which the WAL message arrives with.
 * Also the WAL ceiling: a logical replication stream of its own hears each commit and reads the
 * committed row once at once (the floor of a WAL-woken relay), from the server's commit and from
 * the producer's COMMIT returning (the relays' clock).
 * With `mark`, the bare outbox of the WAL mode: each row read is then marked published by a bare
 * `UPDATE ... WHERE seq = ANY($1)` (bareMarkSql; synchronous_commit off, as the relay's marks; on 2 connections of
 * their own, as the relay marks while it claims), so the machine carries the two statements every
 * table-backed outbox runs per event, and none of the relay's logic.
 */
async function latencyCeiling(bench: Bench, rate: number, mark = false): Promise<{ select: number[]; commit: number[]; wal: number[]; walSelect: number[]; walRead: number[]; walReadWarmup: number[] }> {
  await resetOutbox(bench);
  await settle(bench);
  const probe = new pg.Client({ connectionString: DATABASE_URL });
  await probe.connect();
  // The WAL ceiling: the same commits heard through a logical replication stream of their own (the relay's
  // socket-level reader, pg-wal-stream.ts, and nothing above it) and, at once, a bare primary-key SELECT of the
  // committed row on one of 2 connections (the relay's 2 lanes): what no WAL-woken relay that reads the table
  // once after hearing a commit can beat on this machine under this load.
  const now = (): number => performance.timeOrigin + performance.now();
  const walProbes = await connectClients(2);
  const markers = mark ? await connectClients(2) : [];
  for (const c of markers) await c.query('SET synchronous_commit = off');
  let marked = 0;
  const markSql = bareMarkSql(bench.names.outbox);
  // [commit time, latency] pairs: the first WARMUP seconds are split off at the end (splitWarmup).
  const wal: [number, number][] = [];
  const walSelect: [number, number][] = [];
  /** When the WAL reader's SELECT returned each event id: against the producer's COMMIT return, as the relays are measured. */
  const readAt = new Map<string, number>();
  const fromProducer = (committed: Iterable<readonly [string, number]>): [number, number][] => {
    const xs: [number, number][] = [];
    for (const [id, t] of committed) {
      const r = readAt.get(id);
      if (r !== undefined) xs.push([t, r - t]);
    }
    return xs;
  };
  const warmupMs = WARMUP * 1000;
  const steady = (pairs: Iterable<readonly [number, number]>): number[] => splitWarmup(pairs, warmupMs).steady;
  const inFlight = new Set<Promise<unknown>>();
  let turn = 0;
  await ensurePublication(bench.connection, bench.names);
  const stream = await openWalStream({
    client: bench.connection.replicationConfig!() as never,
    slot: `${walNames(bench.names).slotPrefix}ceiling`,
    publication: walNames(bench.names).publication,
    onCommit: (commit) => {
      const arrived = now();
      wal.push([commit.commitTimeMs, arrived - commit.commitTimeMs]);
      const seq = commit.seqs[0];
      if (seq === undefined) return;
      const lane = turn++ % 2;
      const q = walProbes[lane]!.query<{ id: string }>({ name: 'wal-ceiling-read', text: `SELECT seq, id::text AS id FROM "${bench.schema}".outbox WHERE seq = $1`, values: [seq] }).then((r) => {
        const at = now();
        walSelect.push([commit.commitTimeMs, at - commit.commitTimeMs]);
        if (r.rows[0]) readAt.set(r.rows[0].id, at);
        if (mark) return markers[lane]!.query({ name: 'wal-ceiling-mark', text: markSql, values: [[seq]] }).then((m) => void (marked += m.rowCount ?? 0));
      });
      inFlight.add(q);
      void q.finally(() => inFlight.delete(q));
    },
    onEnd: (err) => log(`WAL ceiling: the stream ended: ${err.message}`),
  });
  const endWal = async (): Promise<void> => {
    await Promise.allSettled([...inFlight]);
    await stream.close();
    await Promise.all([...walProbes, ...markers].map((c) => c.end()));
    if (mark) log(`ceiling ${rate}/s, the bare outbox: ${fmtInt(marked)} of ${fmtInt(walSelect.length)} rows read marked published`);
  };
  const select: [number, number][] = [];
  let running = true;
  const probing = (async () => {
    // The bare outbox carries no probe: its load is the relay's, statement for statement.
    while (running && !mark) {
      const t = performance.now();
      await probe.query({ name: 'wal-ceiling-probe', text: `SELECT seq, id FROM "${bench.schema}".outbox WHERE seq = $1`, values: [select.length + 1] });
      select.push([t, performance.now() - t]);
      await new Promise((r) => setTimeout(r, 1));
    }
  })();
  if (PRODUCERS_IN_CHILD) {
    let commits: readonly (readonly [string, number])[] = [];
    try {
      commits = (await produceInChild({ schema: bench.schema, rate, seconds: SECONDS + WARMUP, clients: 8, keys: KEYS, perTx: 1, notify: false })).commits;
    } finally {
      running = false;
      await probing;
      await probe.end();
      await endWal();
    }
    const read = splitWarmup(fromProducer(commits), warmupMs);
    return { select: steady(select), commit: [], wal: steady(wal), walSelect: steady(walSelect), walRead: read.steady, walReadWarmup: read.warmup };
  }
  const outbox = benchOutbox(bench, false);
  const clients = await connectClients(8);
  const commit: [number, number][] = [];
  let committedAt = new Map<string, number>();
  try {
    ({ committedAt } = await pacedCommits({ rate, seconds: SECONDS + WARMUP, clients: clients.length }, async (t, i) => {
      const c = clients[i]!;
      await c.query('BEGIN');
      const ids = await outbox.enqueue(c, orderEvent(t, t % KEYS));
      const at = performance.now();
      await c.query('COMMIT');
      commit.push([at, performance.now() - at]);
      return ids;
    }));
  } finally {
    running = false;
    await probing;
    await Promise.all([...clients, probe].map((c) => c.end()));
    await endWal();
  }
  const read = splitWarmup(fromProducer([...committedAt].map(([id, t]) => [id, performance.timeOrigin + t] as const)), warmupMs);
  return { select: steady(select), commit: steady(commit), wal: steady(wal), walSelect: steady(walSelect), walRead: read.steady, walReadWarmup: read.warmup };
}

/**
 * Claims per event when only wake-ups start claims (polling off): CLAIM_EVENTS single-event
 * commits 20 ms apart, relay in process (2 lanes), no-op transport. Load-independent where the
 * latency is not: each event needs one claim that finds it and one that comes back empty;
 * anything above 2 is claims of lanes woken for nothing.
 */
async function claimsPerEvent(bench: Bench, wake: 'notify' | 'wal'): Promise<{ perEvent: number; empty: number; acked: number; ordinary: number; bySeq: number; skipped: number }> {
  await resetOutbox(bench);
  await settle(bench);
  const connection = pgConnection({ connectionString: DATABASE_URL, maxConnections: 4 });
  const trace = new StageTrace(() => performance.now());
  const inner = new PostgresRelayStore({ schema: bench.schema, connection, wake });
  let acked = 0;
  const relay = createRelay({ store: trace.wrap(inner), transport: new NoopTransport((e) => (acked += e.length)), pollIntervalMs: 600_000, minPollIntervalMs: 600_000 });
  await relay.start();
  while (wake === 'wal' && (await inner.wakeStatus()).mode !== 'wal') await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 300));
  const before = trace.claimCounts();
  const statsBefore = inner.claimStats();
  const outbox = benchOutbox(bench, wake === 'notify');
  const c = new pg.Client({ connectionString: DATABASE_URL });
  await c.connect();
  for (let i = 0; i < CLAIM_EVENTS; i++) {
    await c.query('BEGIN');
    await outbox.enqueue(c, orderEvent(i, i % KEYS));
    await c.query('COMMIT');
    await new Promise((r) => setTimeout(r, 20));
  }
  const deadline = Date.now() + 30_000;
  while (acked < CLAIM_EVENTS && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 300));
  const after = trace.claimCounts();
  const stats = inner.claimStats();
  await c.end();
  await relay.stop();
  await connection.close();
  return {
    perEvent: (after.claims - before.claims) / CLAIM_EVENTS,
    empty: after.empty - before.empty,
    acked,
    ordinary: (stats.ordinary - statsBefore.ordinary) / CLAIM_EVENTS,
    bySeq: (stats.bySeq - statsBefore.bySeq) / CLAIM_EVENTS,
    skipped: (stats.skipped - statsBefore.skipped) / CLAIM_EVENTS,
  };
}

/** CPU ms (user + system) of one process, from /proc; 0 once it is gone. */
function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return 0;
  }
}

/** Unpaced single-event transactions without NOTIFY from CLIENTS connections for PRODUCER_SECONDS; returns how many. */
async function produceUnpaced(bench: Bench, notify: boolean): Promise<{ count: number; ms: number }> {
  const outbox = benchOutbox(bench, notify);
  const clients = await connectClients(CLIENTS);
  let count = 0;
  const started = performance.now();
  const until = started + PRODUCER_SECONDS * 1000;
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < until) {
      await c.query('BEGIN');
      await outbox.enqueue(c, orderEvent(count, count % KEYS));
      await c.query('COMMIT');
      count++;
    }
  }));
  const ms = performance.now() - started;
  await Promise.all(clients.map((c) => c.end()));
  return { count, ms };
}

/**
 * `n` relay stores in the WAL mode with no relay above them, each streaming its own slot (opened at its
 * first wait), pushed onto `stores` as they open (the caller closes them); `trace(i, commit)` sees each
 * commit store `i` reads. Returns how long each took to stream, ms.
 */
async function openWalStores(bench: Bench, n: number, stores: PostgresRelayStore[], trace?: (i: number, commit: WalCommit) => void): Promise<number[]> {
  const startMs: number[] = [];
  const idle = new AbortController();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const store = new PostgresRelayStore({ schema: bench.schema, connection: bench.connection, wake: 'wal', ...(trace ? { walTrace: (commit: WalCommit) => trace(i, commit) } : {}) });
    stores.push(store);
    await store.waitForEvents(1, idle.signal);
    while ((await store.wakeStatus()).mode !== 'wal') await new Promise((r) => setTimeout(r, 5));
    startMs.push(performance.now() - t);
  }
  return startMs;
}

async function slotCost(bench: Bench, slots: number): Promise<string[]> {
  await resetOutbox(bench);
  await settle(bench);
  const stores: PostgresRelayStore[] = [];
  const startMs: number[] = [];
  try {
    startMs.push(...(await openWalStores(bench, slots, stores)));
    const pids = (await walSlots(bench.connection, bench.names)).flatMap((s) => (s.active && s.activePid !== null ? [s.activePid] : []));
    const wakeupsBefore = stores.reduce((a, s) => a + s.wakeups(), 0);
    const before = pids.map(cpuMs);
    const r = await produceUnpaced(bench, false);
    const cpu = pids.map((p, i) => cpuMs(p) - before[i]!);
    const total = cpu.reduce((a, b) => a + b, 0);
    const commits = stores.reduce((a, s) => a + s.wakeups(), 0) - wakeupsBefore;
    const lag = Math.max(0, ...(await walSlots(bench.connection, bench.names)).map((s) => s.lagBytes));
    log(`${slots} slot(s): ${fmtInt(perSec(r.count, r.ms))} tx/s, ${fmtInt(commits)} wake-ups, walsenders ${fmtInt(total)} ms CPU (${(total / (r.ms / 1000)).toFixed(0)} ms/s), slot start ${startMs.map((m) => m.toFixed(1)).join(', ')} ms, max lag at the end ${fmtInt(lag)} bytes`);
    if (slots === 0) return ['0 (no stream)', fmtInt(perSec(r.count, r.ms)), '-', '-', '-', '-'];
    return [String(slots), fmtInt(perSec(r.count, r.ms)), (total / (r.ms / 1000) / slots).toFixed(0), ((1000 * total) / Math.max(1, r.count) / slots).toFixed(1), median(startMs).toFixed(1), fmtInt(lag)];
  } finally {
    for (const s of stores) await s.close();
  }
}

/**
 * How soon each of `slots` relays hears a commit: `slots` relay stores in the WAL mode (a slot and a
 * stream each, no relay above them, all in this process) while producers in a child process commit
 * single-event transactions at `rate` for SECONDS; per stream, the server's commit time to the
 * moment the stream handed the commit over (`walTrace`), p50 / p99 / max. In production each relay
 * has its own process; here the streams also share this process's event loop.
 */
async function slotWake(bench: Bench, slots: number, rate: number): Promise<string[]> {
  await resetOutbox(bench);
  await settle(bench);
  const now = (): number => performance.timeOrigin + performance.now();
  const heard: number[][] = Array.from({ length: slots }, () => []);
  const stores: PostgresRelayStore[] = [];
  try {
    await openWalStores(bench, slots, stores, (i, commit) => {
      if (commit.seqs.length > 0) heard[i]!.push(now() - commit.commitTimeMs);
    });
    const { commits } = await produceInChild({ schema: bench.schema, rate, seconds: SECONDS, clients: 8, keys: KEYS, perTx: 1, notify: false });
    await new Promise((r) => setTimeout(r, 200));
    const q = (xs: number[], p: number): string => fmtMs(percentile(xs, p));
    for (const xs of heard) xs.sort((a, b) => a - b);
    const each = (p: number): string => heard.map((xs) => q(xs, p)).join(' / ');
    log(`${slots} slot(s) @${rate}/s: ${fmtInt(commits.length)} commits; heard by each stream ${heard.map((xs) => fmtInt(xs.length)).join(' / ')}; server commit -> heard p50 ${each(50)} ms, p99 ${each(99)} ms, max ${each(100)} ms`);
    return [String(slots), String(rate), heard.map((xs) => fmtInt(xs.length)).join(' / '), each(50), each(90), each(99), each(100)];
  } finally {
    for (const s of stores) await s.close();
  }
}

/** Producer tx/s with the mode's relay running in a child process (NOTIFY producers for notify, none for wal). */
async function producerRate(bench: Bench, wake: 'notify' | 'wal'): Promise<number> {
  await resetOutbox(bench);
  await settle(bench);
  const worker = startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, wake, transport: { kind: 'noop' } });
  await worker.started;
  if (wake === 'wal') {
    // The relay opens its slot at its first idle wait.
    const deadline = Date.now() + 30_000;
    while ((await walSlots(bench.connection, bench.names)).filter((s) => s.active).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  }
  const r = await produceUnpaced(bench, wake === 'notify');
  const rate = perSec(r.count, r.ms);
  await worker.stop();
  return rate;
}

await withBench('wal', async (bench) => {
  log(`WAL wake mode vs LISTEN/NOTIFY: latency ${SECONDS} s per rate after ${WARMUP} s of warm-up reported apart (${RATES.join(', ')}/s), producers ${CLIENTS} connections x ${PRODUCER_SECONDS} s x ${ROUNDS} rounds, drain ${fmtInt(EVENTS)} events; schema ${bench.schema}`);
  try {
    const latency: string[][] = [];
    for (let round = 0; round < (SECTIONS.has('latency') ? LATENCY_ROUNDS : 0); round++) {
      for (const rate of RATES) {
        const ceiling = await latencyCeiling(bench, rate);
        const q = (xs: number[], p: number): string => fmtMs(percentile(xs, p));
        log(`ceiling ${rate}/s, no relay: a bare primary-key SELECT during the same commits p50 ${q(ceiling.select, 50)} ms, p99 ${q(ceiling.select, 99)} ms (${fmtInt(ceiling.select.length)} probes); the producers' COMMIT round trip p50 ${q(ceiling.commit, 50)} ms, p99 ${q(ceiling.commit, 99)} ms`);
        latency.push([`ceiling: bare PK SELECT`, String(rate), '-', '-', q(ceiling.select, 50), q(ceiling.select, 90), q(ceiling.select, 99), q(ceiling.select, 100), '-']);
        log(`ceiling ${rate}/s, no relay: server commit -> heard on a bare WAL stream p50 ${q(ceiling.wal, 50)} ms, p99 ${q(ceiling.wal, 99)} ms; -> then one PK SELECT of the row returned p50 ${q(ceiling.walSelect, 50)} ms, p99 ${q(ceiling.walSelect, 99)} ms (${fmtInt(ceiling.walSelect.length)} commits)`);
        latency.push([`ceiling: WAL heard`, String(rate), '-', '-', q(ceiling.wal, 50), q(ceiling.wal, 90), q(ceiling.wal, 99), q(ceiling.wal, 100), '-']);
        latency.push([`ceiling: WAL heard + 1 read`, String(rate), '-', '-', q(ceiling.walSelect, 50), q(ceiling.walSelect, 90), q(ceiling.walSelect, 99), q(ceiling.walSelect, 100), '-']);
        // The relays' own figures run from the producer's COMMIT returning (the issue's commit-to-sink), which comes
        // after the server's commit: this row is the ceiling on that same clock.
        latency.push([`ceiling: the same, from COMMIT returned`, String(rate), '-', '-', q(ceiling.walRead, 50), q(ceiling.walRead, 90), q(ceiling.walRead, 99), q(ceiling.walRead, 100), q(ceiling.walReadWarmup, 99)]);
        summary('wal', `ceiling @${rate}/s (no relay): server commit -> heard on a bare WAL stream and one PK SELECT of the row returned p50 ${q(ceiling.walSelect, 50)} ms, p99 ${q(ceiling.walSelect, 99)} ms (heard alone p50 ${q(ceiling.wal, 50)} ms, p99 ${q(ceiling.wal, 99)} ms); from the producer's COMMIT returned, as the relays are measured: p50 ${q(ceiling.walRead, 50)} ms, p99 ${q(ceiling.walRead, 99)} ms`);
        summary('wal', `ceiling @${rate}/s (no relay): a bare primary-key SELECT round trip during the same commits p50 ${q(ceiling.select, 50)} ms, p99 ${q(ceiling.select, 99)} ms; producers' COMMIT p50 ${q(ceiling.commit, 50)} ms, p99 ${q(ceiling.commit, 99)} ms`);
        const bare = await latencyCeiling(bench, rate, true);
        log(`ceiling ${rate}/s, the bare outbox (WAL heard, one PK SELECT, then an UPDATE marking the row; no relay logic): from the server's commit to the read p50 ${q(bare.walSelect, 50)} ms, p99 ${q(bare.walSelect, 99)} ms; from the producer's COMMIT returned p50 ${q(bare.walRead, 50)} ms, p99 ${q(bare.walRead, 99)} ms`);
        latency.push([`ceiling: bare outbox (+ its marks), from COMMIT returned`, String(rate), '-', '-', q(bare.walRead, 50), q(bare.walRead, 90), q(bare.walRead, 99), q(bare.walRead, 100), q(bare.walReadWarmup, 99)]);
        summary('wal', `ceiling @${rate}/s, the bare outbox (WAL heard, one read, one UPDATE per event; no relay logic), from the producer's COMMIT returned: p50 ${q(bare.walRead, 50)} ms, p99 ${q(bare.walRead, 99)} ms`);
        const variants = MARKS.flatMap((marks) => WHILE_MARKING.map((whileMarking) => ({ marks, whileMarking })));
        for (const wake of MODES) {
          for (const { marks, whileMarking } of round % 2 === 0 ? variants : [...variants].reverse()) {
            const mode = [wake, ...(MARKS.length > 1 ? [`${marks} marks`] : []), ...(WHILE_MARKING.length > 1 ? [`claims while marking ${whileMarking}`] : [])].join(', ');
            const stages = STAGES ? new StageTrace(() => performance.timeOrigin + performance.now(), whileMarking === 'on') : undefined;
            const r = await measureCommitToAck(bench, { rate, seconds: SECONDS, warmupSeconds: WARMUP, clients: 8, keys: KEYS, notify: wake === 'notify', pollIntervalMs: 1000, wake, transport: 'noop', ...(stages ? { stages } : {}), synchronousMarks: marks === 'sync', producersInChild: PRODUCERS_IN_CHILD, ...(LATENCY_LANES > 0 ? { lanes: LATENCY_LANES } : {}) });
            log(`${mode} ${rate}/s: ${fmtInt(r.acked)}/${fmtInt(r.produced)} acked, p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms, max ${fmtMs(r.max)} ms (target in WAL mode: p50 <= 1.0, p99 <= 5)${WARMUP > 0 ? `; the first ${WARMUP} s (${fmtInt(r.warmup.events)} events, not counted above) p50 ${fmtMs(r.warmup.p50)} ms, p99 ${fmtMs(r.warmup.p99)} ms, max ${fmtMs(r.warmup.max)} ms` : ''}; event-loop delay p99 ${fmtMs(r.loopDelayP99)} ms; this process's CPU ${r.cpuUsPerEvent.toFixed(0)} µs per event${stages ? '; stages:' : ' (stages not timed)'}`);
            for (const line of stages?.lines() ?? []) console.log(line);
            latency.push([mode, String(rate), fmtInt(r.achievedRate), `${fmtInt(r.acked)}/${fmtInt(r.produced)}`, fmtMs(r.p50), fmtMs(r.p90), fmtMs(r.p99), fmtMs(r.max), fmtMs(r.warmup.p99)]);
            summary('wal', `${mode} @${rate}/s: commit-to-publish p50 ${fmtMs(r.p50)} ms, p99 ${fmtMs(r.p99)} ms`);
          }
        }
      }
    }
    const claimRows: string[][] = [];
    for (const wake of SECTIONS.has('claims') ? MODES : []) {
      const r = await claimsPerEvent(bench, wake);
      log(`claims per event, ${wake}, woken only (polling off, ${CLAIM_EVENTS} single-event commits 20 ms apart, 2 lanes): ${r.perEvent.toFixed(2)} (${fmtInt(r.empty)} empty; ${r.acked}/${CLAIM_EVENTS} published); queries per event: ordinary ${r.ordinary.toFixed(2)}, by seq ${r.bySeq.toFixed(2)} (answered without a query ${r.skipped.toFixed(2)})`);
      claimRows.push([wake, r.perEvent.toFixed(2), fmtInt(r.empty), r.ordinary.toFixed(2), r.bySeq.toFixed(2), r.skipped.toFixed(2), `${r.acked}/${CLAIM_EVENTS}`]);
    }
    const producer: Record<string, number[]> = { notify: [], wal: [] };
    for (let round = 0; round < (SECTIONS.has('producer') ? ROUNDS : 0); round++) {
      for (const wake of round % 2 === 0 ? MODES : [...MODES].reverse()) {
        const rate = await producerRate(bench, wake);
        producer[wake]!.push(rate);
        log(`producer round ${round + 1}, ${wake}: ${fmtInt(rate)} tx/s`);
      }
    }
    const slotRows: string[][] = [];
    for (const n of SECTIONS.has('slots') ? SLOTS : []) slotRows.push(await slotCost(bench, n));
    const wakeRows: string[][] = [];
    for (const rate of SECTIONS.has('slots') ? RATES : []) for (const n of SLOTS) if (n > 0) wakeRows.push(await slotWake(bench, n, rate));
    const drain: string[][] = [];
    if (SECTIONS.has('drain')) {
      // The floor: a relay process with nothing to claim (empty outbox), for 3 s.
      await resetOutbox(bench);
      const idle = startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, wake: 'wal', transport: { kind: 'noop' }, build: BUILD });
      await idle.started;
      await new Promise((r) => setTimeout(r, 3000));
      const r = await idle.stop();
      log(`idle relay process (wal, ${BUILD === 'dist' ? 'node over dist/' : 'tsx over src/'}, nothing to claim, 3 s): RSS ${mb(r.rssBaseline)} MB before start, max ${mb(r.rssMax)} MB, heap used max ${mb(r.heapMax)} MB`);
      drain.push(['idle (floor)', '', '-', '3.00', mb(r.rssBaseline), mb(r.rssMax), mb(r.heapMax)]);
    }
    const backlog = SECTIONS.has('drain') ? await Backlog.create(bench, EVENTS, KEYS) : undefined;
    // Interleaved, order reversed every other repeat; each node flag set in turn.
    const drainRuns = Array.from({ length: backlog ? DRAIN_REPEAT : 0 }, (_, i) => (i % 2 === 0 ? [...MODES] : [...MODES].reverse()))
      .flat()
      .flatMap((wake) => DRAIN_FLAGS.map((flags) => ({ wake, flags })));
    for (const { wake, flags } of drainRuns) {
      await backlog!.restore();
      const worker = startRelayWorker({ schema: bench.schema, batchSize: 500, lanes: 2, deleteOnPublish: false, expect: EVENTS, wake, transport: { kind: 'noop' }, nodeFlags: flags, build: BUILD });
      const r = await worker.result;
      const cpuPerEvent = r.cpuMs === undefined ? '-' : ((1000 * r.cpuMs) / Math.max(1, r.published)).toFixed(1);
      log(`drain ${wake}${flags.length ? ` (${flags.join(' ')})` : ''}, relay ${BUILD === 'dist' ? 'node over dist/' : 'tsx over src/'}: ${fmtInt(r.published)} in ${(r.ms / 1000).toFixed(2)} s = ${fmtInt(perSec(r.published, r.ms))} events/s, ${cpuPerEvent} µs CPU per event, relay RSS max ${mb(r.rssMax)} MB (target in WAL mode <= ${TARGET.rssMb}), heap used max ${mb(r.heapMax)} MB`);
      drain.push([wake, flags.join(' '), fmtInt(perSec(r.published, r.ms)), (r.ms / 1000).toFixed(2), mb(r.rssBaseline), mb(r.rssMax), mb(r.heapMax)]);
      summary('wal', `${wake}${flags.length ? ` (${flags.join(' ')})` : ''}: drain ${fmtInt(perSec(r.published, r.ms))} events/s, relay RSS max ${mb(r.rssMax)} MB (target <= ${TARGET.rssMb} MB in WAL mode)`);
    }
    console.log('');
    if (latency.length > 0) printTable(['wake', 'rate/s', 'achieved/s', 'acked/produced', `p50 ms (WAL target <= ${TARGET.p50Ms})`, 'p90 ms', `p99 ms (WAL target <= ${TARGET.p99Ms})`, 'max ms', WARMUP > 0 ? `p99 ms of the first ${WARMUP} s (not above)` : 'warm-up p99 (none)'], latency);
    console.log('');
    if (claimRows.length > 0) printTable(['wake', 'claim calls per event', 'empty', 'ordinary claim queries per event', 'claims by seq per event', 'answered without a query', 'published'], claimRows);
    console.log('');
    if (producer.notify!.length > 0) printTable(['wake', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1} tx/s`), 'median tx/s'], MODES.map((m) => [m, ...producer[m]!.map(fmtInt), fmtInt(median(producer[m]!))]));
    console.log('');
    if (drain.length > 0) printTable(['wake', 'node flags', 'drain events/s', 'seconds', 'relay RSS start MB', `relay RSS max MB (target <= ${TARGET.rssMb})`, 'heap used max MB'], drain);
    console.log('');
    if (slotRows.length > 0) printTable(['slots', 'producer tx/s', 'CPU ms/s per walsender', 'CPU ms per 1,000 tx per walsender', 'slot start ms (median)', 'max lag bytes at end'], slotRows);
    if (wakeRows.length > 0) printTable(['slots', 'rate/s', 'commits heard, per stream', 'server commit -> heard p50 ms, per stream', 'p90', 'p99', 'max'], wakeRows);
  } finally {
    await dropPublication(bench.connection, bench.names).catch(() => {});
  }
});
