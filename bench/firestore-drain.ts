/**
 * Firestore store on Google's emulator: how fast enqueue writes and one
 * relay drains a backlog to a transport that acks at once, with the
 * deliveries checked for loss and per-key order. The emulator is a single
 * in-memory Java process: these figures say how the store behaves, not what
 * Firestore sustains.
 *
 *   bash scripts/firestore/up.sh
 *   node --conditions=txbox-source --import tsx bench/firestore-drain.ts
 *
 * Settings (environment): BENCH_EVENTS (5000), BENCH_KEYS (100),
 * BENCH_PER_TX (50, events per transaction), BENCH_WRITERS (4),
 * BENCH_BATCH (500), BENCH_LANES (2).
 */
import { randomBytes } from 'node:crypto';
import { Firestore } from '@google-cloud/firestore';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { checkDeliveries, RecordingTransport } from 'txbox/testing';
import { FirestoreOutboxStore, FirestoreRelayStore } from '../src/stores/firestore/index.ts';

const int = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const EVENTS = int('BENCH_EVENTS', 5000);
const KEYS = int('BENCH_KEYS', 100);
const PER_TX = int('BENCH_PER_TX', 50);
const WRITERS = int('BENCH_WRITERS', 4);
const BATCH = int('BENCH_BATCH', 500);
const LANES = int('BENCH_LANES', 2);

process.env.FIRESTORE_EMULATOR_HOST ??= '127.0.0.1:8086';
process.env.METADATA_SERVER_DETECTION ??= 'none';
const projectId = `txbox-bench-${randomBytes(4).toString('hex')}`;
const db = new Firestore({ projectId });
const E = defineEvent({ type: 'E', aggregateType: 'K', destination: 'd', payload: payloadType<{ n: number }>() });
const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db }), events: [E] });

const committed = new Map<string, string[]>();
let next = 0;
const t0 = performance.now();
await Promise.all(
  Array.from({ length: WRITERS }, async (_, w) => {
    // Each writer owns its keys (key % WRITERS === w), so one key's events come from one writer in order.
    for (;;) {
      const start = next;
      if (start >= EVENTS) return;
      next += PER_TX;
      const events = Array.from({ length: Math.min(PER_TX, EVENTS - start) }, (_, i) => E({ aggregateId: String(((start + i) % (KEYS / WRITERS)) * WRITERS + w), payload: { n: start + i } }));
      const ids = await db.runTransaction((tx) => outbox.enqueue(tx, events), { maxAttempts: 1 });
      events.forEach((e, i) => committed.set(`K:${e.aggregateId}`, [...(committed.get(`K:${e.aggregateId}`) ?? []), ids[i]!]));
    }
  }),
);
const enqueueMs = performance.now() - t0;
console.log(`enqueue: ${EVENTS} events in transactions of ${PER_TX}, ${WRITERS} writers: ${(enqueueMs / 1000).toFixed(2)} s = ${Math.round((EVENTS / enqueueMs) * 1000)} events/s`);

const transport = new RecordingTransport();
const store = new FirestoreRelayStore({ firestore: db });
const relay = createRelay({ store, transport, batchSize: BATCH, lanes: LANES, retention: false, metrics: false });
const t1 = performance.now();
await relay.start();
while (new Set(transport.acked.map((e) => e.id)).size < EVENTS) await new Promise((r) => setTimeout(r, 20));
const drainMs = performance.now() - t1;
await relay.stop();
await store.close();
const report = checkDeliveries(committed, transport.acked);
console.log(`drain: ${EVENTS} events, batch ${BATCH}, ${LANES} lanes: ${(drainMs / 1000).toFixed(2)} s = ${Math.round((EVENTS / drainMs) * 1000)} events/s (lost ${report.lost}, order violations ${report.orderViolations}, duplicates ${report.duplicates})`);
await db.terminate();
await (await fetch(`http://${process.env.FIRESTORE_EMULATOR_HOST}/emulator/v1/projects/${projectId}/databases/(default)/documents`, { method: 'DELETE' })).arrayBuffer();
