/**
 * Lease hand-over (issue 12 item 8): how long bucket leases take to move
 * between relays.
 *
 *   together:  relays A and B start at the same time; time until each holds its fair share (128 of 256)
 *   join:      A runs alone and holds all 256; B starts; time until B holds 128
 *   crash:     A and B share the buckets; A aborts (as a crash: leases not released);
 *              time until B holds all 256
 *
 * Times are printed in ms and in heartbeats (a heartbeat is leaseTtlMs / 3, the
 * lease keeper's tick) and lease TTLs. BENCH_LEASE_TTL_MS (3000) sets the TTL;
 * BENCH_REPEAT (3) the runs per case. The outbox is empty: this measures the
 * lease keeper, not publishing. The database clock decides who holds what
 * (lease_until > now()), polled every 10 ms.
 *
 *   node --conditions=txbox-source --import tsx bench/lease-handover.ts
 */
import { createRelay, type Relay } from 'txbox';
import { PostgresRelayStore } from 'txbox/postgres';
import { envInt, log, NoopTransport, printTable, resetOutbox, summary, withBench, type Bench } from './lib.ts';

const TTL = envInt('BENCH_LEASE_TTL_MS', 3000);
const REPEAT = envInt('BENCH_REPEAT', 3);
const HEARTBEAT = Math.floor(TTL / 3);

function relay(bench: Bench, id: string): Relay {
  return createRelay({
    store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection }),
    transport: new NoopTransport(),
    relayId: id,
    leaseTtlMs: TTL,
    pollIntervalMs: 100,
  });
}

async function held(bench: Bench): Promise<Map<string, number>> {
  const rows = await bench.sql<{ owner: string; n: number }>(
    `SELECT owner, count(*)::int AS n FROM ${bench.names.buckets} WHERE lease_until > now() GROUP BY owner`,
  );
  return new Map(rows.map((r) => [r.owner, r.n]));
}

/** Polls until `done(held)`; returns ms since `from`, or NaN after `limitMs`. */
async function until(bench: Bench, from: number, limitMs: number, done: (h: Map<string, number>) => boolean): Promise<number> {
  for (;;) {
    const h = await held(bench);
    const now = performance.now();
    if (done(h)) return now - from;
    if (now - from > limitMs) return Number.NaN;
    await new Promise((r) => setTimeout(r, 10));
  }
}

const fair = (h: Map<string, number>, id: string): boolean => (h.get(id) ?? 0) >= 128;

await withBench('lease_handover', async (bench) => {
  const limit = TTL * 10;
  const rows: { name: string; ms: number[] }[] = [
    { name: 'together: both hold 128', ms: [] },
    { name: 'join: B holds 128', ms: [] },
    { name: 'crash: B holds 256', ms: [] },
  ];
  for (let run = 0; run < REPEAT; run++) {
    await resetOutbox(bench);
    let a = relay(bench, `a${run}`);
    let b = relay(bench, `b${run}`);
    let t0 = performance.now();
    await Promise.all([a.start(), b.start()]);
    rows[0]!.ms.push(await until(bench, t0, limit, (h) => fair(h, `a${run}`) && fair(h, `b${run}`)));
    await Promise.all([a.stop(), b.stop()]);

    await resetOutbox(bench);
    a = relay(bench, `a${run}`);
    await a.start();
    await until(bench, performance.now(), limit, (h) => h.get(`a${run}`) === 256);
    // B joins at a random point of A's tick cycle.
    await new Promise((r) => setTimeout(r, Math.random() * HEARTBEAT));
    b = relay(bench, `b${run}`);
    t0 = performance.now();
    await b.start();
    rows[1]!.ms.push(await until(bench, t0, limit, (h) => fair(h, `b${run}`)));
    await until(bench, performance.now(), limit, (h) => fair(h, `a${run}`) && fair(h, `b${run}`));

    await new Promise((r) => setTimeout(r, Math.random() * HEARTBEAT));
    t0 = performance.now();
    await a.abort();
    rows[2]!.ms.push(await until(bench, t0, limit, (h) => h.get(`b${run}`) === 256));
    await b.stop();
    log(`run ${run + 1}: ${rows.map((r) => `${r.name} ${Math.round(r.ms[run]!)} ms`).join(', ')}`);
  }
  const f = (ms: number): string => `${Math.round(ms)} ms = ${(ms / HEARTBEAT).toFixed(2)} heartbeats = ${(ms / TTL).toFixed(2)} TTL`;
  printTable(
    ['case', 'runs', 'median', 'worst'],
    rows.map((r) => {
      const sorted = [...r.ms].sort((x, y) => x - y);
      return [r.name, String(r.ms.length), f(sorted[Math.floor((sorted.length - 1) / 2)]!), f(sorted[sorted.length - 1]!)];
    }),
  );
  summary('lease-handover', `ttl ${TTL} ms: ${rows.map((r) => `${r.name} worst ${Math.round(Math.max(...r.ms))} ms`).join('; ')}`);
});
