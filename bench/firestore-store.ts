/**
 * The Firestore store on Google's emulator in the shapes of the PostgreSQL
 * benchmarks, in one run on a project of its own (a random project id; its
 * documents are deleted after; collections prefixed `sb_outbox`):
 *
 *   1. drain (bench/drain.ts): a backlog drained by one relay (in this
 *      process, no-op transport, batch BENCH_BATCH, BENCH_LANES lanes)
 *      against the raw limit on the same documents: a loop of one bare query
 *      (state == 'pending', ordered by ts and document id, after the last
 *      document seen, BENCH_BATCH at a time) and one WriteBatch marking those
 *      documents published (state, doneAt, attempts), with no lease, no
 *      fencing transaction and no per-key check. Every run starts from the
 *      same documents (loaded once through enqueue, read back, written again
 *      after the project's documents are deleted); raw and relay alternate,
 *      and each repeat's ratio is taken from runs next to each other. The
 *      relay's RSS and heap are sampled every 100 ms (this process: the
 *      bench's own baseline is printed with them).
 *   2. commit-to-publish latency (bench/latency.ts): single-event
 *      `runTransaction`s paced to BENCH_RATES (a low rate, where the relay
 *      is idle between events and the figure is the wake-up, and 500/s)
 *      through a relay in this process to a no-op transport (one clock),
 *      woken by its snapshot listener (the default), and at the first rate
 *      by polling only (`wake: 'poll'`, the default 1000 ms / min 5 ms) for
 *      comparison; the rate the producers reached, and empty claims per
 *      second loaded and idle. The emulator and the client run several times
 *      slower for their first seconds: the run starts with a warm-up.
 *   3. producer overhead (bench/producer.ts): a business `runTransaction`
 *      (read one of 1000 customer documents, update its counters, create an
 *      order document; each producer has customers of its own, so that no
 *      two transactions contend) with and without one enqueue, BENCH_CLIENTS at once,
 *      modes interleaved for BENCH_ROUNDS rounds (order reversed every other
 *      round); slowdown per round against that round's business-only run,
 *      median reported.
 *
 *   4. (BENCH_PARTS=listener, not in the default set) what an open snapshot
 *      listener on the outbox costs the producers on the emulator: single-
 *      event transactions at full speed without and with one, alternating.
 *
 * The emulator is one in-memory Java process on the same (shared) machine:
 * the figures say how the store behaves against its own raw limit, not what
 * Firestore sustains. The 1-minute load average is printed next to each figure.
 *
 *   bash scripts/firestore/up.sh
 *   node --conditions=txbox-source --import tsx bench/firestore-store.ts
 *
 * Settings (environment): BENCH_PARTS (drain,latency,producer; or listener),
 * BENCH_EVENTS (4000), BENCH_KEYS (1000), BENCH_BATCH (500), BENCH_LANES (2),
 * BENCH_REPEAT (3), BENCH_RATES (100,500), BENCH_LATENCY_SECONDS (8),
 * BENCH_LATENCY_CLIENTS (64), BENCH_SECONDS (3 per producer mode and round),
 * BENCH_CLIENTS (4), BENCH_ROUNDS (5). FIRESTORE_EMULATOR_HOST (127.0.0.1:8086).
 */
import { randomBytes } from 'node:crypto';
import { FieldPath, FieldValue, Firestore, type DocumentData, type QueryDocumentSnapshot } from '@google-cloud/firestore';
import { createOutbox, createRelay, type NewEvent } from 'txbox';
import { FirestoreOutboxStore, FirestoreRelayStore } from '../src/stores/firestore/index.ts';
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
  pacedCommits,
  pct,
  percentile,
  perSec,
  printTable,
  summary,
  waitUntil,
  type OrderPayload,
} from './lib.ts';

const PARTS = (process.env.BENCH_PARTS ?? 'drain,latency,producer').split(',').map((s) => s.trim());
const EVENTS = envInt('BENCH_EVENTS', 4000);
const KEYS = envInt('BENCH_KEYS', 1000);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const REPEAT = envInt('BENCH_REPEAT', 3);
const RATES = envList('BENCH_RATES', [100, 500]);
const LATENCY_SECONDS = envInt('BENCH_LATENCY_SECONDS', 8);
const LATENCY_CLIENTS = envInt('BENCH_LATENCY_CLIENTS', 64);
const SECONDS = envInt('BENCH_SECONDS', 3);
const CLIENTS = envInt('BENCH_CLIENTS', 4);
const ROUNDS = envInt('BENCH_ROUNDS', 5);

process.env.FIRESTORE_EMULATOR_HOST ??= '127.0.0.1:8086';
process.env.METADATA_SERVER_DETECTION ??= 'none';
const projectId = `txbox-bench-store-${randomBytes(4).toString('hex')}`;
const db = new Firestore({ projectId });
const COLLECTION = 'sb_outbox';
const outboxCol = db.collection(COLLECTION);
const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db, collection: COLLECTION }), events: [OrderPlaced] });

/** Deletes every document of this run's project (the emulator's own endpoint): outbox, buckets, relays, business documents. */
async function wipe(): Promise<void> {
  const res = await fetch(`http://${process.env.FIRESTORE_EMULATOR_HOST}/emulator/v1/projects/${projectId}/databases/(default)/documents`, { method: 'DELETE' });
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`the emulator refused to delete the project's documents: HTTP ${res.status}`);
}

/** Writes `docs` in WriteBatches of 500, `parallel` at a time. */
async function writeAll(docs: readonly { id: string; data: DocumentData }[], parallel = 4): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      for (;;) {
        const from = next;
        if (from >= docs.length) return;
        next = Math.min(docs.length, from + 500);
        const batch = db.batch();
        for (const d of docs.slice(from, next)) batch.set(outboxCol.doc(d.id), d.data);
        await batch.commit();
      }
    }),
  );
}

/**
 * Commits and queries for `ms` before anything is measured: the emulator (a
 * JVM) and the client's channel run several times slower for their first
 * seconds, which would land in whichever figure comes first.
 */
async function warmUp(ms = 4000): Promise<void> {
  const col = db.collection('sb_warmup');
  const end = performance.now() + ms;
  let n = 0;
  await Promise.all(
    Array.from({ length: 32 }, async (_, i) => {
      while (performance.now() < end) {
        await db.runTransaction(async (tx) => {
          const snap = await tx.get(col.doc(String(i)));
          tx.set(col.doc(String(i)), { n: Number(snap.get('n') ?? 0) + 1 });
          tx.set(col.doc(), { i });
        });
        if (i === 0) await col.orderBy('i').limit(50).get();
        n++;
      }
    }),
  );
  await wipe();
  log(`warm-up: ${fmtInt(n)} transactions in ${ms / 1000} s, not measured (${load()})`);
}

// ---------------------------------------------------------------- 1. drain

let backlog: { id: string; data: DocumentData }[] = [];

/** Loads the backlog once through enqueue in transactions of 250 (not timed), then keeps its documents as written (with their commit-time `ts`). */
async function loadBacklog(): Promise<void> {
  await wipe();
  const started = performance.now();
  const perTx = 250;
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      for (;;) {
        const from = next;
        if (from >= EVENTS) return;
        next = Math.min(EVENTS, from + perTx);
        const list: NewEvent<OrderPayload, 'OrderPlaced'>[] = [];
        for (let i = from; i < next; i++) list.push(orderEvent(i, i % KEYS));
        const batch = db.batch();
        await outbox.enqueue(batch, list);
        await batch.commit();
      }
    }),
  );
  const ms = performance.now() - started;
  const snap = await outboxCol.get();
  backlog = snap.docs.map((d) => ({ id: d.id, data: d.data() }));
  log(`loaded ${fmtInt(backlog.length)} events over ${KEYS} keys through enqueue in ${(ms / 1000).toFixed(1)} s (${fmtInt(perSec(EVENTS, ms))}/s, WriteBatches of ${perTx}, 4 at once, not timed; ${load()}); kept as the backlog of every run`);
}

async function restore(): Promise<void> {
  await wipe();
  await writeAll(backlog);
}

async function rawDrain(): Promise<number> {
  await restore();
  const query = outboxCol.where('state', '==', 'pending').orderBy('ts').orderBy(FieldPath.documentId()).limit(BATCH);
  let rows = 0;
  let last: QueryDocumentSnapshot | undefined;
  const started = performance.now();
  for (;;) {
    const page = await (last ? query.startAfter(last) : query).get();
    if (page.empty) break;
    const batch = db.batch();
    for (const d of page.docs) batch.update(d.ref, { state: 'published', doneAt: FieldValue.serverTimestamp(), attempts: FieldValue.increment(1) });
    await batch.commit();
    rows += page.size;
    last = page.docs[page.size - 1];
  }
  const ms = performance.now() - started;
  const rate = perSec(rows, ms);
  log(`raw query + WriteBatch, batch ${BATCH}: ${fmtInt(rows)} documents in ${(ms / 1000).toFixed(2)} s = ${fmtInt(rate)} documents/s (${load()})`);
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
  const store = new FirestoreRelayStore({ firestore: db, collection: COLLECTION });
  const ids = new Set<string>();
  const transport = new NoopTransport((events) => events.forEach((e) => ids.add(e.id)));
  const errors: string[] = [];
  const memory = new MemorySampler(100);
  const rssBase = memory.maxRss;
  const relay = createRelay({ store, transport, batchSize: BATCH, lanes: LANES, retention: false, metrics: false });
  relay.on('error', (e) => errors.push(`${e.phase}: ${e.error.message}`));
  const started = performance.now();
  await relay.start();
  const done = await waitUntil(() => ids.size >= EVENTS, 300_000);
  const ms = performance.now() - started;
  memory.stop();
  await relay.stop();
  await store.close();
  const rate = perSec(ids.size, ms);
  const l = load();
  const [published, pending] = await Promise.all(['published', 'pending'].map(async (s) => (await outboxCol.where('state', '==', s).count().get()).data().count));
  log(
    `relay no-op, batch ${BATCH}, lanes ${LANES}: ${fmtInt(ids.size)} events (${fmtInt(transport.published - ids.size)} published twice) in ${(ms / 1000).toFixed(2)} s = ${fmtInt(rate)} events/s${done ? '' : ' (TIMED OUT)'}; ` +
      `RSS ${mb(rssBase)} MB at start, max ${mb(memory.maxRss)} MB, max heap used ${mb(memory.maxHeapUsed)} MB; documents published ${fmtInt(published!)}, pending ${fmtInt(pending!)} (${l})`,
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
    // Alternate which goes first.
    let raw: number;
    let relay: DrainRun;
    if (rep % 2 === 1) {
      raw = await rawDrain();
      relay = await relayDrain();
    } else {
      relay = await relayDrain();
      raw = await rawDrain();
    }
    reps.push({ raw, relay });
  }
  console.log('\nRelay (no-op transport) against the raw limit (bare query + WriteBatch), per repeat:');
  printTable(
    ['repeat', 'relay ev/s', 'raw docs/s', 'relay / raw', 'RSS start MB', 'max RSS MB', 'max heap MB', 'load'],
    reps.map((r, i) => [String(i + 1), fmtInt(r.relay.rate), fmtInt(r.raw), pct(r.relay.rate / r.raw), mb(r.relay.rssBase), mb(r.relay.rssMax), mb(r.relay.heapMax), r.relay.load]),
  );
  summary('firestore-store', `drain: relay median ${fmtInt(median(reps.map((r) => r.relay.rate)))}/s, raw median ${fmtInt(median(reps.map((r) => r.raw)))} documents/s, median ratio ${pct(median(reps.map((r) => r.relay.rate / r.raw)))}; max RSS ${mb(Math.max(...reps.map((r) => r.relay.rssMax)))} MB (${load()})`);
}

// ---------------------------------------------------------------- 2. latency

async function latencyRun(rate: number, wake: 'listen' | 'poll', label: string): Promise<string[]> {
  await wipe();
  const ackedAt = new Map<string, number>();
  const transport = new NoopTransport((events) => {
    const now = performance.now();
    for (const e of events) if (!ackedAt.has(e.id)) ackedAt.set(e.id, now);
  });
  const store = new FirestoreRelayStore({ firestore: db, collection: COLLECTION, wake });
  const counted = countClaims(store);
  const relay = createRelay({ store: counted.store, transport, retention: false, metrics: false });
  await relay.start();
  // Idle first (the relay's wait has grown to pollIntervalMs): the claims of idle seconds are what waiting costs.
  await new Promise((r) => setTimeout(r, 2000));
  counted.counts.reset();
  await new Promise((r) => setTimeout(r, 2000));
  const idleEmptyPerSec = counted.counts.empty / 2;
  counted.counts.reset();
  const { committedAt, ms } = await pacedCommits({ rate, seconds: LATENCY_SECONDS, clients: LATENCY_CLIENTS }, (t) =>
    db.runTransaction((tx) => outbox.enqueue(tx, orderEvent(t, t % KEYS)), { maxAttempts: 1 }),
  );
  const busy = { claims: counted.counts.claims, empty: counted.counts.empty };
  await waitUntil(() => ackedAt.size >= committedAt.size, 30_000);
  await relay.stop();
  await store.close();
  const f = latencyFigures(committedAt, ackedAt);
  const achieved = perSec(f.produced, ms);
  const l = load();
  const emptyPerSec = perSec(busy.empty, ms);
  log(
    `${label}: ${fmtInt(f.acked)}/${fmtInt(f.produced)} acked at ${fmtInt(achieved)}/s, p50 ${f.p50.toFixed(1)} ms, p90 ${f.p90.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms, max ${f.max.toFixed(1)} ms; ` +
      `claims ${fmtInt(perSec(busy.claims, ms))}/s of which empty ${fmtInt(emptyPerSec)}/s; idle: ${idleEmptyPerSec.toFixed(1)} empty claims/s (${l})`,
  );
  summary('firestore-store', `latency ${label}: at ${fmtInt(achieved)}/s p50 ${f.p50.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms, ${fmtInt(f.acked)}/${fmtInt(f.produced)} acked; empty claims ${fmtInt(emptyPerSec)}/s under load, ${idleEmptyPerSec.toFixed(1)}/s idle (${l})`);
  return [label, fmtInt(achieved), `${fmtInt(f.acked)}/${fmtInt(f.produced)}`, f.p50.toFixed(1), f.p90.toFixed(1), f.p99.toFixed(1), f.max.toFixed(1), fmtInt(emptyPerSec), idleEmptyPerSec.toFixed(1), l];
}

async function latencyPart(): Promise<void> {
  log(`latency: ${LATENCY_SECONDS} s per scenario, ${LATENCY_CLIENTS} producers at once, single-event runTransaction, relay defaults (batch 500, lanes 2, polling 1000 ms / min 5 ms), no-op transport`);
  const rows: string[][] = [];
  for (const rate of RATES) rows.push(await latencyRun(rate, 'listen', `${rate}/s, snapshot listener (default)`));
  rows.push(await latencyRun(RATES[0]!, 'poll', `${RATES[0]}/s, polling only (wake: 'poll')`));
  console.log('');
  printTable(['scenario', 'events/s', 'acked/produced', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'empty claims/s (loaded)', 'empty claims/s (idle)', 'load'], rows);
}

// ---------------------------------------------------------------- 4. what a listener costs the producers

/**
 * Single-event `runTransaction`s from BENCH_LATENCY_CLIENTS producers as fast
 * as they go, without and with an open snapshot listener on the relay's wake
 * query (state == 'pending', newest `ts` first, limit 1) and no relay,
 * alternating, BENCH_ROUNDS rounds of BENCH_SECONDS.
 */
async function listenerPart(): Promise<void> {
  log(`listener: ${LATENCY_CLIENTS} producers of single-event transactions at full speed, ${SECONDS} s per mode, ${ROUNDS} round(s), no relay`);
  let t = 0;
  const produce = async (): Promise<number> => {
    let n = 0;
    const started = performance.now();
    const end = started + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: LATENCY_CLIENTS }, async () => {
        while (performance.now() < end) {
          const i = t++;
          await db.runTransaction((tx) => outbox.enqueue(tx, orderEvent(i, i % KEYS)), { maxAttempts: 1 });
          n++;
        }
      }),
    );
    return perSec(n, performance.now() - started);
  };
  const rows: string[][] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    await wipe();
    const without = await produce();
    const l1 = load();
    let snapshots = 0;
    const unsubscribe = outboxCol.where('state', '==', 'pending').orderBy('ts', 'desc').limit(1).onSnapshot(
      () => snapshots++,
      () => {},
    );
    const withListener = await produce();
    unsubscribe();
    const l2 = load();
    log(`round ${round}: ${fmtInt(without)} tx/s without a listener (${l1}), ${fmtInt(withListener)} tx/s with one (${snapshots} snapshots; ${l2})`);
    rows.push([String(round), fmtInt(without), fmtInt(withListener), pct(1 - withListener / without), `${l1}, ${l2}`]);
  }
  console.log('');
  printTable(['round', 'tx/s, no listener', 'tx/s, listener open', 'slowdown', 'load'], rows);
  summary('firestore-store', `listener: producers ${rows.map((r) => `${r[1]} -> ${r[2]}`).join(', ')} tx/s without -> with an open snapshot listener on the outbox (${load()})`);
}

// ---------------------------------------------------------------- 3. producer

interface ProducerRun {
  readonly txPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly load: string;
}

async function producerRun(withEnqueue: boolean): Promise<ProducerRun> {
  const customers = db.collection('sb_customers');
  const orders = db.collection('sb_orders');
  const latencies: number[] = [];
  let count = 0;
  let orderNo = 0;
  const started = performance.now();
  const deadline = started + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      while (performance.now() < deadline) {
        const t = performance.now();
        // Each producer has customers of its own: two transactions on one document make the emulator hold the
        // second for seconds (its locks), a stall that would swamp the comparison.
        const customer = client + CLIENTS * Math.floor((Math.random() * CUSTOMERS) / CLIENTS);
        const total = 1000 + Math.floor(Math.random() * 9000);
        const order = ++orderNo;
        await db.runTransaction(async (tx) => {
          const ref = customers.doc(String(customer));
          const snap = await tx.get(ref);
          tx.set(ref, { orders: Number(snap.get('orders') ?? 0) + 1, spent: Number(snap.get('spent') ?? 0) + total });
          tx.create(orders.doc(), { customerId: customer, total, status: 'placed', createdAt: FieldValue.serverTimestamp() });
          if (withEnqueue) await outbox.enqueue(tx, orderEvent(order, customer));
        });
        latencies.push(performance.now() - t);
        count++;
      }
    }),
  );
  const ms = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { txPerSec: perSec(count, ms), p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1] ?? Number.NaN, load: load() };
}

async function producerPart(): Promise<void> {
  log(`producer: ${CLIENTS} transactions at once, ${SECONDS} s per mode and round, ${ROUNDS} round(s), business-only and + enqueue interleaved`);
  await producerRun(true);
  log('producer: one + enqueue run done as a warm-up, not counted');
  const rounds: { business: ProducerRun; enqueue: ProducerRun }[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? [false, true] : [true, false];
    const r: Partial<(typeof rounds)[number]> = {};
    for (const withEnqueue of order) {
      const run = await producerRun(withEnqueue);
      r[withEnqueue ? 'enqueue' : 'business'] = run;
      log(`round ${round} ${withEnqueue ? '+ enqueue' : 'business only'}: ${fmtInt(run.txPerSec)} tx/s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms, max ${run.max.toFixed(0)} ms (${run.load})`);
    }
    rounds.push(r as (typeof rounds)[number]);
  }
  console.log('\nPer round (slowdown = 1 - with enqueue / business only of the same round):');
  printTable(
    ['round', 'business tx/s', '+ enqueue tx/s', 'slowdown', 'p50 ms business / + enqueue', 'p99 ms business / + enqueue', 'load'],
    rounds.map((r, i) => [
      String(i + 1),
      fmtInt(r.business.txPerSec),
      fmtInt(r.enqueue.txPerSec),
      pct(1 - r.enqueue.txPerSec / r.business.txPerSec),
      `${r.business.p50.toFixed(2)} / ${r.enqueue.p50.toFixed(2)}`,
      `${r.business.p99.toFixed(2)} / ${r.enqueue.p99.toFixed(2)}`,
      r.enqueue.load,
    ]),
  );
  const slow = median(rounds.map((r) => 1 - r.enqueue.txPerSec / r.business.txPerSec));
  summary(
    'firestore-store',
    `producer: business median ${fmtInt(median(rounds.map((r) => r.business.txPerSec)))} tx/s, + enqueue ${fmtInt(median(rounds.map((r) => r.enqueue.txPerSec)))} tx/s, median slowdown ${(slow * 100).toFixed(1)}% (${load()})`,
  );
}

// ----------------------------------------------------------------

const onSignal = (): void => {
  void wipe().finally(() => process.exit(130));
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);
try {
  log(`firestore-store: ${new Date().toISOString()}, ${machine()}, node ${process.version}; emulator ${process.env.FIRESTORE_EMULATOR_HOST}, project ${projectId}`);
  await warmUp();
  if (PARTS.includes('drain')) await drainPart();
  if (PARTS.includes('latency')) await latencyPart();
  if (PARTS.includes('producer')) await producerPart();
  if (PARTS.includes('listener')) await listenerPart();
} finally {
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  await wipe();
  await db.terminate();
  log(`firestore-store done: ${machine()}`);
}
