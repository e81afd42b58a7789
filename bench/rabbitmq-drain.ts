/**
 * RabbitMQ publish benchmark, no database: how fast one amqplib connection
 * gets ~300-byte persistent messages confirmed into a durable queue, and
 * what RabbitMqTransport adds on top (JSON, headers, size check, mandatory,
 * return correlation, outcome per event). This is the ceiling a relay
 * publishing to RabbitMQ can reach from one process; compare it with
 * bench/drain.ts's SQL limits.
 *
 *   node --conditions=txbox-source --import tsx bench/rabbitmq-drain.ts
 *
 * Modes, each on a fresh durable queue behind a durable direct exchange:
 * - raw, windows: WINDOW publishes on a confirm channel, await all confirms, repeat
 *   (what the relay does with one wave per call);
 * - raw, sliding: at most WINDOW confirms outstanding, a new publish as each confirm arrives;
 * - raw, windows, with the body padded by as many bytes as the transport's headers take (is the cost the bytes?);
 * - raw, windows, with the properties and headers RabbitMqTransport sends (what they cost the broker),
 *   with its properties but no headers, and with its headers packed into one header of JSON;
 * - RabbitMqTransport: publish() calls of WINDOW events with distinct keys, one call at a time;
 * - RabbitMqTransport, 2 calls at once (the relay's 2 lanes), on 1 and on 2 channels.
 *
 * Settings (environment): BENCH_RABBITMQ_MESSAGES (200000), BENCH_RABBITMQ_WINDOW (500),
 * BENCH_RABBITMQ_URL (amqp://guest:guest@127.0.0.1:5672), BENCH_RABBITMQ_ROUNDS (1).
 */
import { randomBytes } from 'node:crypto';
import { connect, type ConfirmChannel, type Options } from 'amqplib';
import { uuidv7, type OutboxEvent } from 'txbox';
import { RabbitMqTransport, encodeRabbitMqMessage } from 'txbox/rabbitmq';
import { envInt, fmtInt, log, orderPayload, perSec, printTable, summary } from './lib.ts';

const MESSAGES = envInt('BENCH_RABBITMQ_MESSAGES', 200_000);
const WINDOW = envInt('BENCH_RABBITMQ_WINDOW', 500);
const ROUNDS = envInt('BENCH_RABBITMQ_ROUNDS', 1);
const URL = process.env.BENCH_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const run = randomBytes(3).toString('hex');

const conn = await connect(URL);
conn.on('error', () => {});
const admin = await conn.createChannel();
const names: string[] = [];
const body = (i: number): Buffer => Buffer.from(JSON.stringify(orderPayload(i, i % 1000)));
const version = String(conn.connection.serverProperties.version);
log(`RabbitMQ drain benchmark: ${fmtInt(MESSAGES)} persistent messages of ~${body(0).length} bytes, window ${WINDOW}, RabbitMQ ${version}, durable classic queue`);

/** A fresh durable exchange and queue, bound by the queue's name (= the transport's default routing key for that destination). */
async function freshQueue(): Promise<string> {
  const name = `txbox_bench_${run}_${names.length + 1}`;
  await admin.assertExchange(name, 'direct', { durable: true });
  await admin.assertQueue(name, { durable: true });
  await admin.bindQueue(name, name, name);
  names.push(name);
  return name;
}

async function checkStored(name: string): Promise<void> {
  const { messageCount } = await admin.checkQueue(name);
  if (messageCount !== MESSAGES) log(`  WARNING: ${name} holds ${messageCount} messages, expected ${MESSAGES}`);
  await admin.deleteQueue(name);
  await admin.deleteExchange(name);
  names.splice(names.indexOf(name), 1);
}

function publishOne(ch: ConfirmChannel, name: string, i: number, content: Buffer = body(i)): Promise<void> {
  return new Promise((resolve, reject) => {
    ch.publish(name, name, content, { persistent: true, mandatory: true, messageId: `${run}-${i}`, contentType: 'application/json' }, (err: unknown) =>
      err ? reject(err as Error) : resolve(),
    );
  });
}

async function rawWindows(padBytes = 0): Promise<number> {
  const name = await freshQueue();
  const ch = await conn.createConfirmChannel();
  const pad = (i: number): Buffer => Buffer.concat([body(i), Buffer.alloc(padBytes, 0x20)]);
  const started = performance.now();
  for (let start = 0; start < MESSAGES; start += WINDOW) {
    const n = Math.min(WINDOW, MESSAGES - start);
    await Promise.all(Array.from({ length: n }, (_, j) => publishOne(ch, name, start + j, padBytes ? pad(start + j) : undefined)));
  }
  const ms = performance.now() - started;
  await ch.close();
  await checkStored(name);
  return perSec(MESSAGES, ms);
}

/** What the transport's properties become in the header-shape experiments. */
type Shape = 'transport' | 'properties-only' | 'one-packed-header';

function reshape(properties: Options.Publish, shape: Shape): Options.Publish {
  if (shape === 'transport') return properties;
  const { headers, ...rest } = properties;
  return shape === 'properties-only' ? rest : { ...rest, headers: { txbox: JSON.stringify(headers) } };
}

/**
 * Windows again, each message encoded as RabbitMqTransport encodes it (7 headers, type, timestamp);
 * `properties-only` drops the headers table, `one-packed-header` packs it into one header of JSON.
 */
async function rawWindowsWithHeaders(shape: Shape = 'transport'): Promise<number> {
  const name = await freshQueue();
  const ch = await conn.createConfirmChannel();
  const occurredAt = new Date();
  const started = performance.now();
  for (let start = 0; start < MESSAGES; start += WINDOW) {
    const n = Math.min(WINDOW, MESSAGES - start);
    await Promise.all(
      events(name, start, n, occurredAt).map((e) => {
        const { content, properties } = encodeRabbitMqMessage(e);
        return new Promise<void>((resolve, reject) => ch.publish(name, name, content, reshape(properties, shape), (err: unknown) => (err ? reject(err as Error) : resolve())));
      }),
    );
  }
  const ms = performance.now() - started;
  await ch.close();
  await checkStored(name);
  return perSec(MESSAGES, ms);
}

async function rawSliding(): Promise<number> {
  const name = await freshQueue();
  const ch = await conn.createConfirmChannel();
  const started = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < MESSAGES) await publishOne(ch, name, next++);
  };
  await Promise.all(Array.from({ length: WINDOW }, worker));
  const ms = performance.now() - started;
  await ch.close();
  await checkStored(name);
  return perSec(MESSAGES, ms);
}

function events(destination: string, start: number, n: number, occurredAt: Date): OutboxEvent[] {
  return Array.from({ length: n }, (_, j) => {
    const i = start + j;
    const id = `c${i % 1000}-${Math.floor(i / 1000)}`;
    return {
      id: uuidv7(),
      type: 'OrderPlaced',
      aggregateType: 'Order',
      aggregateId: id,
      key: `Order:${id}`,
      destination,
      payload: orderPayload(i, i % 1000),
      headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
      occurredAt,
      version: 1,
    };
  });
}

/** `concurrent` loops each send publish() calls of WINDOW events, over `channels` confirm channels. */
async function viaTransport(concurrent: number, channels: number): Promise<number> {
  const name = await freshQueue();
  const transport = new RabbitMqTransport({ url: URL, exchange: name, channels, confirmTimeoutMs: 60_000 });
  await transport.start();
  const signal = new AbortController().signal;
  const occurredAt = new Date();
  let failed = 0;
  let next = 0;
  const started = performance.now();
  const loop = async (): Promise<void> => {
    while (next < MESSAGES) {
      const start = next;
      const n = Math.min(WINDOW, MESSAGES - start);
      next += n;
      for (const o of await transport.publish(events(name, start, n, occurredAt), signal)) if (!o.ok) failed++;
    }
  };
  await Promise.all(Array.from({ length: concurrent }, loop));
  const ms = performance.now() - started;
  await transport.close();
  if (failed > 0) log(`  WARNING: ${failed} events failed`);
  await checkStored(name);
  return perSec(MESSAGES, ms);
}

/** What the transport's properties and headers add to a message, in bytes (their AMQP encoding, about). */
const headerBytes = (() => {
  const { properties } = encodeRabbitMqMessage(events('q', 0, 1, new Date())[0]!);
  let n = 0;
  for (const [k, v] of Object.entries(properties.headers ?? {})) n += k.length + 2 + String(v).length + 4;
  return n + String(properties.type ?? '').length + 8;
})();

const modes = [
  { label: `raw confirm channel, windows of ${WINDOW}`, run: () => rawWindows() },
  { label: `raw, windows of ${WINDOW}, body padded by ${headerBytes} bytes, no headers`, run: () => rawWindows(headerBytes) },
  { label: `raw confirm channel, sliding ${WINDOW}`, run: rawSliding },
  { label: `raw, windows of ${WINDOW}, transport's headers`, run: () => rawWindowsWithHeaders() },
  { label: `raw, windows of ${WINDOW}, transport's properties, no headers`, run: () => rawWindowsWithHeaders('properties-only') },
  { label: `raw, windows of ${WINDOW}, transport's headers packed into one`, run: () => rawWindowsWithHeaders('one-packed-header') },
  { label: `RabbitMqTransport, calls of ${WINDOW}`, run: () => viaTransport(1, 1) },
  { label: `RabbitMqTransport, 2 calls at once, 1 channel`, run: () => viaTransport(2, 1) },
  { label: `RabbitMqTransport, 2 calls at once, 2 channels`, run: () => viaTransport(2, 2) },
];
const results = modes.map(() => [] as number[]);
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const [i, mode] of modes.entries()) {
      results[i]!.push(await mode.run());
      log(`${mode.label}: ${fmtInt(results[i]!.at(-1)!)} msg/s`);
    }
  }
} finally {
  for (const n of names) {
    await admin.deleteQueue(n).catch(() => {});
    await admin.deleteExchange(n).catch(() => {});
  }
  await conn.close();
}

const best = results.map((xs) => Math.max(...xs));
console.log(`\nRabbitMQ ${version} publish with confirms, persistent, durable queue, one connection, ${fmtInt(MESSAGES)} messages (best of ${ROUNDS}):`);
printTable(
  ['mode', 'msg/s', 'vs raw windows'],
  modes.map((m, i) => [m.label, fmtInt(best[i]!), `${((best[i]! / best[0]!) * 100).toFixed(0)}%`]),
);
summary('rabbitmq-drain', modes.map((m, i) => `${m.label} ${fmtInt(best[i]!)}`).join('; '));
