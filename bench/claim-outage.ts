/**
 * The claim during an outage (issue 11 item 4): how long one claim takes
 * when many keys are blocked, and the plan of the claim's query.
 *
 *   outage:  BENCH_OUTAGE_EVENTS (300,000) pending events on BENCH_OUTAGE_KEYS
 *            (1,000) keys whose first event is backing off (a broker outage)
 *   parked:  BENCH_PARKED_KEYS (5,000) keys with one parked event each
 *   none:    an empty outbox, the baseline
 *
 * Each case is claimed BENCH_CLAIMS (50) times empty (nothing publishable),
 * then again after BENCH_FRESH (1,000) publishable events on other keys were
 * enqueued behind the blocked ones (non-empty claims of the relay's default
 * batch, 500). Blocked states are made by the relay store's own complete
 * statement (retry with a 1 hour delay, park), as a relay does.
 * Prints p50/p99 per case and EXPLAIN (ANALYZE, BUFFERS) of the claim query.
 *
 *   node --conditions=txbox-source --import tsx bench/claim-outage.ts
 */
import { PostgresRelayStore, type PostgresConnection } from 'txbox/postgres';
import type { BucketLease, Completion } from 'txbox';
import { benchOutbox, envInt, fmtInt, loadBacklog, log, orderEvent, percentile, printTable, resetOutbox, settle, summary, withBench, type Bench } from './lib.ts';

const OUTAGE_EVENTS = envInt('BENCH_OUTAGE_EVENTS', 300_000);
const OUTAGE_KEYS = envInt('BENCH_OUTAGE_KEYS', 1000);
const PARKED_KEYS = envInt('BENCH_PARKED_KEYS', 5000);
const CLAIMS = envInt('BENCH_CLAIMS', 50);
const FRESH = envInt('BENCH_FRESH', 1000);
const LIMIT = 500;
const RELAY = 'bench-claim-outage';

interface Row {
  readonly name: string;
  readonly empty: number[];
  readonly full: number[];
  readonly claimed: number;
}

async function leaseAll(store: PostgresRelayStore): Promise<BucketLease[]> {
  return store.lease(RELAY, [], 256, 3_600_000);
}

/** Completes the given rows as a relay would: in batches, each row with `outcome`. */
async function completeRows(bench: Bench, store: PostgresRelayStore, leases: BucketLease[], where: string, outcome: 'retry' | 'park'): Promise<number> {
  const tokens = new Map(leases.map((l) => [l.bucket, l.token]));
  const rows = await bench.sql<{ seq: string; bucket: number }>(
    `SELECT seq, bucket FROM ${bench.names.outbox} WHERE seq IN (${where}) ORDER BY seq`,
  );
  let applied = 0;
  for (let i = 0; i < rows.length; i += 1000) {
    const batch: Completion[] = rows.slice(i, i + 1000).map((r) =>
      outcome === 'retry'
        ? { seq: Number(r.seq), token: tokens.get(r.bucket)!, outcome, delayMs: 3_600_000, error: 'broker down' }
        : { seq: Number(r.seq), token: tokens.get(r.bucket)!, outcome, error: 'rejected' },
    );
    applied += (await store.complete(RELAY, batch)).applied;
  }
  return applied;
}

async function timeClaims(store: PostgresRelayStore, leases: BucketLease[]): Promise<{ ms: number[]; claimed: number }> {
  const ms: number[] = [];
  let claimed = 0;
  await store.claim(leases, { limit: LIMIT, skipParkedDestinations: [] }); // warm-up
  for (let i = 0; i < CLAIMS; i++) {
    const t0 = performance.now();
    claimed = (await store.claim(leases, { limit: LIMIT, skipParkedDestinations: [] })).length;
    ms.push(performance.now() - t0);
  }
  return { ms: ms.sort((a, b) => a - b), claimed };
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of the claim function's query: its text from
 * pg_proc with the parameters bound, under the function's own SET clauses.
 */
async function explainClaim(connection: PostgresConnection, bench: Bench): Promise<string> {
  const { rows } = await connection.query<{ prosrc: string; proconfig: string[] | null }>(
    `SELECT prosrc, proconfig FROM pg_proc WHERE oid = $1::regproc`,
    [`${bench.names.claimFn}`],
  );
  const fn = rows[0]!;
  const body = fn.prosrc
    .replace(/^\s*BEGIN\s+RETURN QUERY/i, '')
    .replace(/;\s*END\s*$/i, '')
    .replace(/\bp_buckets\b/g, '$1::smallint[]')
    .replace(/\bp_limit\b/g, '$2::integer')
    .replace(/\bp_skip\b/g, '$3::text[]');
  return connection.transaction(async (tx) => {
    for (const setting of fn.proconfig ?? []) {
      const [name, value] = setting.split('=');
      await tx.query(`SET LOCAL ${name} = ${value}`);
    }
    const plan = await tx.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${body}`, [Array.from({ length: 256 }, (_, b) => b), LIMIT, []]);
    // The 256 bucket numbers of the filter, shortened.
    return (plan.rows as { 'QUERY PLAN': string }[]).map((r) => r['QUERY PLAN'].replace(/'\{0,1,2,[0-9,]*\}'/, "'{0,...,255}'")).join('\n');
  });
}

async function measure(bench: Bench, store: PostgresRelayStore, leases: BucketLease[], name: string, freshFrom: number): Promise<Row> {
  await settle(bench);
  const empty = await timeClaims(store, leases);
  log(`${name}: empty claims returned ${empty.claimed} events`);
  console.log(`--- plan, ${name}, empty claim ---\n${await explainClaim(bench.connection, bench)}`);
  const outbox = benchOutbox(bench, false);
  const fresh = Array.from({ length: FRESH }, (_, i) => orderEvent(freshFrom + i, 10_000_000 + i));
  await bench.connection.transaction((tx) => outbox.enqueue(tx, fresh));
  await settle(bench);
  const full = await timeClaims(store, leases);
  console.log(`--- plan, ${name}, non-empty claim ---\n${await explainClaim(bench.connection, bench)}`);
  return { name, empty: empty.ms, full: full.ms, claimed: full.claimed };
}

await withBench('claim_outage', async (bench) => {
  const store = new PostgresRelayStore({ connection: bench.connection, schema: bench.schema });
  const results: Row[] = [];

  await resetOutbox(bench);
  results.push(await measure(bench, store, await leaseAll(store), 'none', 0));

  await resetOutbox(bench);
  let leases = await leaseAll(store);
  const loadMs = await loadBacklog(bench, OUTAGE_EVENTS, OUTAGE_KEYS);
  const t0 = performance.now();
  const retried = await completeRows(bench, store, leases, `SELECT min(seq) FROM ${bench.names.outbox} GROUP BY key`, 'retry');
  log(`outage: loaded ${fmtInt(OUTAGE_EVENTS)} events on ${fmtInt(OUTAGE_KEYS)} keys in ${fmtInt(loadMs)} ms; ${retried} heads backing off (complete and hold took ${fmtInt(performance.now() - t0)} ms)`);
  results.push(await measure(bench, store, leases, `outage ${OUTAGE_EVENTS}/${OUTAGE_KEYS}`, OUTAGE_EVENTS));
  // What the claim adds every releaseHeldEveryMs: the walk over the blockers that hold rows (none released here).
  const sweeps: number[] = [];
  for (let i = 0; i < 5; i++) {
    const s0 = performance.now();
    await store.releaseHeld();
    sweeps.push(performance.now() - s0);
  }
  log(`outage: releaseHeld over ${OUTAGE_KEYS} blockers: ${sweeps.map((ms) => ms.toFixed(1)).join(', ')} ms`);

  await resetOutbox(bench);
  leases = await leaseAll(store);
  await loadBacklog(bench, PARKED_KEYS, PARKED_KEYS);
  const parked = await completeRows(bench, store, leases, `SELECT seq FROM ${bench.names.outbox}`, 'park');
  log(`parked: ${parked} single-event keys parked`);
  results.push(await measure(bench, store, leases, `parked ${PARKED_KEYS}`, PARKED_KEYS));

  const f = (x: number): string => x.toFixed(2);
  printTable(
    ['case', 'empty p50 ms', 'empty p99 ms', 'non-empty p50 ms', 'non-empty p99 ms', 'claimed'],
    results.map((r) => [r.name, f(percentile(r.empty, 50)), f(percentile(r.empty, 99)), f(percentile(r.full, 50)), f(percentile(r.full, 99)), String(r.claimed)]),
  );
  summary('claim-outage', results.map((r) => `${r.name} empty p50 ${f(percentile(r.empty, 50))} ms, non-empty p50 ${f(percentile(r.full, 50))} ms`).join('; '));
});
