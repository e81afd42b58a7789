/**
 * NATS JetStream publish benchmark, no database: how fast one nats.js
 * connection gets ~300-byte messages acked by a file-backed stream with
 * async acks, and what NatsTransport adds on top (headers, JSON, size check,
 * outcome per event). This is the ceiling a relay publishing to NATS can
 * reach from one process; compare it with bench/drain.ts's SQL limits.
 *
 *   node --conditions=txbox-source --import tsx bench/nats-drain.ts
 *
 * Modes, each on a fresh stream:
 * - raw, windows: js.publish() of WINDOW messages at once, await all acks, repeat
 *   (what the relay does with one batch per call);
 * - raw, sliding: at most WINDOW acks outstanding, a new publish as each ack arrives;
 * - NatsTransport: publish() calls of WINDOW events with distinct keys.
 *
 * Settings (environment): BENCH_NATS_MESSAGES (200000), BENCH_NATS_WINDOW (500),
 * BENCH_NATS_SERVERS (127.0.0.1:4222), BENCH_NATS_ROUNDS (1), BENCH_NATS_ASYNC_TRACES=1 to
 * measure nats.js with its default async stack traces on.
 */
import { randomBytes } from 'node:crypto';
import { connect, nanos } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, StorageType, type JetStreamClient } from '@nats-io/jetstream';
import { uuidv7, type OutboxEvent } from 'txbox';
import { NatsTransport } from 'txbox/nats';
import { envInt, fmtInt, log, orderPayload, perSec, printTable, summary } from './lib.ts';

const MESSAGES = envInt('BENCH_NATS_MESSAGES', 200_000);
const WINDOW = envInt('BENCH_NATS_WINDOW', 500);
const ROUNDS = envInt('BENCH_NATS_ROUNDS', 1);
const SERVERS = process.env.BENCH_NATS_SERVERS ?? '127.0.0.1:4222';
const run = randomBytes(3).toString('hex');

// noAsyncTraces as NatsTransport sets it on its own connections: without it nats.js spends about a third more CPU per publish on stack traces.
const nc = await connect({ servers: SERVERS, name: 'txbox-bench', noAsyncTraces: process.env.BENCH_NATS_ASYNC_TRACES !== '1' });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc, { timeout: 30_000 });
const streams: string[] = [];
const body = (i: number): Uint8Array => Buffer.from(JSON.stringify(orderPayload(i, i % 1000)));
log(`NATS drain benchmark: ${fmtInt(MESSAGES)} messages of ~${body(0).length} bytes, window ${WINDOW}, server ${SERVERS} (max_payload ${fmtInt(nc.info?.max_payload ?? 0)}, nats-server ${nc.info?.version})`);

async function freshStream(): Promise<string> {
  const name = `TXBOX_BENCH_${run}_${streams.length + 1}`;
  await jsm.streams.add({ name, subjects: [`txboxbench.${run}.${streams.length + 1}.>`], storage: StorageType.File, duplicate_window: nanos(120_000) });
  streams.push(name);
  return `txboxbench.${run}.${streams.length}`;
}

async function checkStored(subject: string): Promise<number> {
  const name = streams[streams.length - 1]!;
  const info = await jsm.streams.info(name);
  if (info.state.messages !== MESSAGES) log(`  WARNING: ${name} holds ${info.state.messages} messages for ${subject}, expected ${MESSAGES}`);
  return info.state.messages;
}

function publishOne(client: JetStreamClient, subject: string, i: number): Promise<unknown> {
  return client.publish(`${subject}.k${i % 1000}`, body(i), { msgID: `${run}-${subject}-${i}` });
}

async function rawWindows(): Promise<number> {
  const subject = await freshStream();
  const started = performance.now();
  for (let start = 0; start < MESSAGES; start += WINDOW) {
    const n = Math.min(WINDOW, MESSAGES - start);
    await Promise.all(Array.from({ length: n }, (_, j) => publishOne(js, subject, start + j)));
  }
  const ms = performance.now() - started;
  await checkStored(subject);
  return perSec(MESSAGES, ms);
}

async function rawSliding(): Promise<number> {
  const subject = await freshStream();
  const started = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < MESSAGES) await publishOne(js, subject, next++);
  };
  await Promise.all(Array.from({ length: WINDOW }, worker));
  const ms = performance.now() - started;
  await checkStored(subject);
  return perSec(MESSAGES, ms);
}

async function viaTransport(): Promise<number> {
  const subject = await freshStream();
  const transport = new NatsTransport({ connection: nc, subjects: { orders: subject }, keyInSubject: true, publishTimeoutMs: 30_000 });
  await transport.start();
  const signal = new AbortController().signal;
  const occurredAt = new Date();
  const started = performance.now();
  let failed = 0;
  for (let start = 0; start < MESSAGES; start += WINDOW) {
    const n = Math.min(WINDOW, MESSAGES - start);
    const events: OutboxEvent[] = Array.from({ length: n }, (_, j) => {
      const i = start + j;
      return {
        id: uuidv7(),
        type: 'OrderPlaced',
        aggregateType: 'Order',
        // The same 1,000 keys (so subjects) as the raw modes; a call of 500 holds distinct keys, as the relay's do.
        aggregateId: `c${i % 1000}`,
        key: `Order:c${i % 1000}`,
        destination: 'orders',
        payload: orderPayload(i, i % 1000),
        headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
        occurredAt,
        version: 1,
      };
    });
    for (const o of await transport.publish(events, signal)) if (!o.ok) failed++;
  }
  const ms = performance.now() - started;
  await transport.close();
  if (failed > 0) log(`  WARNING: ${failed} events failed`);
  await checkStored(subject);
  return perSec(MESSAGES, ms);
}

const results: Record<string, number[]> = { windows: [], sliding: [], transport: [] };
try {
  for (let r = 0; r < ROUNDS; r++) {
    results.windows!.push(await rawWindows());
    log(`raw js.publish, windows of ${WINDOW}: ${fmtInt(results.windows!.at(-1)!)} msg/s`);
    results.sliding!.push(await rawSliding());
    log(`raw js.publish, sliding window of ${WINDOW}: ${fmtInt(results.sliding!.at(-1)!)} msg/s`);
    results.transport!.push(await viaTransport());
    log(`NatsTransport.publish, calls of ${WINDOW}: ${fmtInt(results.transport!.at(-1)!)} events/s`);
    for (const s of streams.splice(0)) await jsm.streams.delete(s);
  }
} finally {
  for (const s of streams) await jsm.streams.delete(s).catch(() => {});
  await nc.close();
}

const best = (xs: number[]): number => Math.max(...xs);
console.log(`\nJetStream publish, file storage, one connection, ${fmtInt(MESSAGES)} messages (best of ${ROUNDS}):`);
printTable(
  ['mode', 'msg/s', 'vs raw windows'],
  [
    [`raw js.publish, windows of ${WINDOW}`, fmtInt(best(results.windows!)), '100%'],
    [`raw js.publish, sliding ${WINDOW}`, fmtInt(best(results.sliding!)), `${((best(results.sliding!) / best(results.windows!)) * 100).toFixed(0)}%`],
    [`NatsTransport, calls of ${WINDOW}`, fmtInt(best(results.transport!)), `${((best(results.transport!) / best(results.windows!)) * 100).toFixed(0)}%`],
  ],
);
summary('nats-drain', `raw ${fmtInt(best(results.windows!))} msg/s (windows of ${WINDOW}), sliding ${fmtInt(best(results.sliding!))}, NatsTransport ${fmtInt(best(results.transport!))} events/s`);
