/**
 * The HTTP client alone, without a database: node:http against undici (the
 * HTTP transport's client since it moved from node:http), in the same run,
 * rounds alternated.
 * One POST per event to a receiver in a child process (bench/receiver-process.ts,
 * answering 204), the way the relay sends: BENCH_LANES publish calls at a
 * time, each a batch of BENCH_BATCH events with at most BENCH_SOCKETS requests
 * in flight (the transport's maxSockets, default 64).
 *
 *   node --conditions=txbox-source --import tsx bench/http-clients.ts
 *
 * Clients:
 *   transport       txbox's HttpTransport.publish (undici Agent, dispatch; builds and signs each request: the whole transport)
 *   transport-node  the same transport as it was on node:http (bench/node-http-transport.ts)
 *   node-http       node:http request() on a keep-alive Agent (maxSockets, lifo), requests built beforehand
 *   undici-pool     undici Pool, connections = maxSockets, pipelining 1, requests built beforehand
 *   undici-pool-p8  the same with HTTP/1.1 pipelining 8 per connection (fewer connections)
 * For each: events/s and this process's CPU per event (µs), median over rounds.
 *
 * Then (BENCH_RELAY_EVENTS > 0, default 20000) the same comparison inside the relay: a relay in a child
 * process (bench/relay-worker.ts, batch 500, lanes 2) drains a backlog through HttpTransport (undici)
 * and through the node:http copy (bench/node-http-transport.ts), both unsigned as the relay worker's
 * are, rounds alternated; with the relay's and the receiver's CPU per event (µs).
 *
 * Settings: BENCH_EVENTS (20000 per client and round), BENCH_ROUNDS (3), BENCH_BATCH (500),
 * BENCH_LANES (2), BENCH_SOCKETS (64), BENCH_CLIENTS_ONLY (comma list of client names), BENCH_RELAY_EVENTS (20000; 0 skips).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { request as httpRequest, Agent as HttpAgent } from 'node:http';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import type { OutboxEvent } from 'txbox';
import { HttpTransport } from 'txbox/http';
import { Backlog, envInt, fmtInt, log, machine, mb, median, orderPayload, perSec, printTable, summary, withBench } from './lib.ts';
import { startRelayWorker } from './relay-process.ts';
import { NodeHttpBenchTransport } from './node-http-transport.ts';
import type { ReceiverMessage } from './receiver-process.ts';

const EVENTS = envInt('BENCH_EVENTS', 20_000);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const BATCH = envInt('BENCH_BATCH', 500);
const LANES = envInt('BENCH_LANES', 2);
const SOCKETS = envInt('BENCH_SOCKETS', 64);
const RELAY_EVENTS = process.env.BENCH_RELAY_EVENTS === '0' ? 0 : envInt('BENCH_RELAY_EVENTS', 20_000);
const SECRET = 'whsec_' + Buffer.alloc(32, 7).toString('base64');

interface Prepared {
  readonly body: Buffer;
  readonly headers: Record<string, string>;
}

/** Sends one prebuilt request; resolves on a 2xx with the body drained. */
type SendOne = (r: Prepared) => Promise<void>;

interface Client {
  readonly name: string;
  /** Publishes one batch: resolves when every event is acked. */
  publishBatch(events: readonly OutboxEvent[], prepared: readonly Prepared[]): Promise<void>;
  close(): Promise<void>;
}

function makeEvents(n: number): OutboxEvent[] {
  return Array.from({ length: n }, (_, i) => {
    const payload = orderPayload(i, i % 1000);
    return {
      id: crypto.randomUUID(),
      type: 'OrderPlaced',
      aggregateType: 'Order',
      aggregateId: `c${i % 1000}`,
      key: `Order:c${i % 1000}`,
      destination: 'orders',
      payload,
      payloadJson: JSON.stringify(payload),
      headers: { 'content-type': 'application/json' },
      occurredAt: new Date(),
      version: null,
    };
  });
}

/** The request a transport would build (same size and header count; the signature is a placeholder). */
function prepare(e: OutboxEvent): Prepared {
  const body = Buffer.from(JSON.stringify({ ...e, payload: undefined, payloadJson: undefined }).replace('}', `,"payload":${e.payloadJson}}`));
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'content-length': String(body.length),
      'ce-specversion': '1.0',
      'ce-id': e.id,
      'ce-type': e.type,
      'ce-source': 'txbox',
      'ce-subject': `${e.aggregateType}:${e.aggregateId}`,
      'ce-time': e.occurredAt.toISOString(),
      'ce-partitionkey': e.key,
      'webhook-id': e.id,
      'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
      'webhook-signature': 'v1,' + Buffer.alloc(32, 1).toString('base64'),
    },
  };
}

/** At most SOCKETS sends of one batch at a time, as the transport's publish call does. */
async function pumped(prepared: readonly Prepared[], send: SendOne): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < prepared.length) await send(prepared[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(SOCKETS, prepared.length) }, worker));
}

function transportClient(url: string): Client {
  const transport = new HttpTransport({ endpoints: { orders: url }, secret: SECRET, maxSockets: SOCKETS });
  return {
    name: 'transport',
    async publishBatch(events) {
      const outcomes = await transport.publish(events, new AbortController().signal);
      const failed = outcomes.find((o) => !o.ok);
      if (failed) throw new Error(`publish failed: ${JSON.stringify(failed)}`);
    },
    close: () => transport.close(),
  };
}

function nodeTransportClient(url: string): Client {
  const transport = new NodeHttpBenchTransport({ endpoints: { orders: url }, secret: SECRET, maxSockets: SOCKETS });
  return {
    name: 'transport-node',
    async publishBatch(events) {
      const outcomes = await transport.publish(events, new AbortController().signal);
      const failed = outcomes.find((o) => !o.ok);
      if (failed) throw new Error(`publish failed: ${JSON.stringify(failed)}`);
    },
    close: () => transport.close(),
  };
}

function nodeHttpClient(url: string): Client {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: SOCKETS, maxFreeSockets: SOCKETS, scheduling: 'lifo' });
  const u = new URL(url);
  const send: SendOne = (r) =>
    new Promise<void>((resolve, reject) => {
      const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent, headers: r.headers }, (res) => {
        const status = res.statusCode ?? 0;
        res.resume();
        res.on('end', () => (status >= 200 && status < 300 ? resolve() : reject(new Error(`status ${status}`))));
      });
      req.on('error', reject);
      req.end(r.body);
    });
  return { name: 'node-http', publishBatch: (_e, prepared) => pumped(prepared, send), close: async () => agent.destroy() };
}

function undiciClient(url: string, pipelining: number): Client {
  const u = new URL(url);
  const pool = new Pool(u.origin, { connections: pipelining > 1 ? Math.ceil(SOCKETS / pipelining) : SOCKETS, pipelining, keepAliveTimeout: 30_000 });
  const send: SendOne = async (r) => {
    const res = await pool.request({ path: u.pathname, method: 'POST', headers: r.headers, body: r.body });
    await res.body.dump();
    if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`status ${res.statusCode}`);
  };
  return { name: pipelining > 1 ? `undici-pool-p${pipelining}` : 'undici-pool', publishBatch: (_e, prepared) => pumped(prepared, send), close: () => pool.close() };
}

async function startReceiver(): Promise<{ url: string; child: ChildProcess }> {
  const file = fileURLToPath(new URL('./receiver-process.ts', import.meta.url));
  const child = fork(file, [], { execArgv: ['--conditions=txbox-source', '--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: ReceiverMessage) => (m.type === 'listening' ? resolve(m.url) : reject(new Error(`receiver said ${m.type}`))));
    child.once('exit', (code) => reject(new Error(`receiver exited with ${String(code)}`)));
  });
  return { url, child };
}

/** Sends all events, LANES batches at a time; returns events/s and CPU µs per event of this process. */
async function run(client: Client, events: readonly OutboxEvent[]): Promise<{ rate: number; cpuUs: number }> {
  const prepared = client.name.startsWith('transport') ? [] : events.map(prepare);
  let next = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: LANES }, async () => {
      for (;;) {
        const from = next;
        if (from >= events.length) return;
        next = Math.min(events.length, from + BATCH);
        await client.publishBatch(events.slice(from, next), prepared.slice(from, next));
      }
    }),
  );
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { rate: (events.length * 1000) / ms, cpuUs: (used.user + used.system) / events.length };
}

const receiver = await startReceiver();
try {
  log(`http-clients: ${new Date().toISOString()}, ${machine()}, node ${process.version}`);
  log(`${fmtInt(EVENTS)} events per client and round, ${ROUNDS} rounds, batch ${BATCH}, ${LANES} lanes, ${SOCKETS} sockets; receiver ${receiver.url} in a child process`);
  const factories: Record<string, () => Client> = {
    transport: () => transportClient(receiver.url),
    'transport-node': () => nodeTransportClient(receiver.url),
    'node-http': () => nodeHttpClient(receiver.url),
    'undici-pool': () => undiciClient(receiver.url, 1),
    'undici-pool-p8': () => undiciClient(receiver.url, 8),
  };
  const only = process.env.BENCH_CLIENTS_ONLY?.split(',').map((s) => s.trim());
  const names = Object.keys(factories).filter((n) => !only || only.includes(n));
  const results = new Map<string, { rate: number; cpuUs: number }[]>(names.map((n) => [n, []]));
  // Warm-up: one small run per client (JIT, connections), not counted.
  for (const name of names) {
    const c = factories[name]!();
    await run(c, makeEvents(2000));
    await c.close();
  }
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? names : [...names].reverse();
    for (const name of order) {
      const client = factories[name]!();
      const r = await run(client, makeEvents(EVENTS));
      await client.close();
      results.get(name)!.push(r);
      log(`round ${round} ${name}: ${fmtInt(r.rate)} events/s, client CPU ${fmtInt(r.cpuUs)} µs/event`);
    }
  }
  const base = median(results.get('node-http')?.map((r) => r.rate) ?? [Number.NaN]);
  printTable(
    ['client', 'events/s (median)', 'per round', 'vs node-http', 'client CPU µs/event (median)'],
    names.map((n) => {
      const rs = results.get(n)!;
      const rate = median(rs.map((r) => r.rate));
      return [n, fmtInt(rate), rs.map((r) => fmtInt(r.rate)).join(' / '), `${((rate / base) * 100).toFixed(0)}%`, fmtInt(median(rs.map((r) => r.cpuUs)))];
    }),
  );
  for (const n of names) summary('http-clients', `${n}: median ${fmtInt(median(results.get(n)!.map((r) => r.rate)))} events/s, ${fmtInt(median(results.get(n)!.map((r) => r.cpuUs)))} µs CPU/event`);
  if (RELAY_EVENTS > 0) {
    await withBench('httpclients', async (bench) => {
      const backlog = await Backlog.create(bench, RELAY_EVENTS, 1000);
      const kinds = ['http', 'http-node'] as const;
      const label = (k: string): string => (k === 'http' ? 'HttpTransport (undici)' : 'HttpTransport as it was (node:http)');
      const relay = new Map<string, { rate: number; relayUs: number; receiverUs: number }[]>(kinds.map((k) => [k, []]));
      const receiverCpu = (): Promise<number> =>
        new Promise((resolve) => {
          const on = (m: ReceiverMessage): void => {
            if (m.type !== 'cpu') return;
            receiver.child.off('message', on);
            resolve(m.us);
          };
          receiver.child.on('message', on);
          receiver.child.send({ type: 'cpu' });
        });
      for (let round = 1; round <= ROUNDS; round++) {
        for (const kind of round % 2 === 1 ? kinds : [...kinds].reverse()) {
          await backlog.restore();
          const before = await receiverCpu();
          const r = await startRelayWorker({ schema: bench.schema, batchSize: BATCH, lanes: LANES, deleteOnPublish: false, expect: RELAY_EVENTS, transport: { kind, url: receiver.url } }).result;
          const receiverUs = ((await receiverCpu()) - before) / r.published;
          const rate = perSec(r.published, r.ms);
          const relayUs = ((r.cpuMs ?? Number.NaN) * 1000) / r.published;
          relay.get(kind)!.push({ rate, relayUs, receiverUs });
          log(`round ${round} relay -> ${label(kind)}: ${fmtInt(rate)} events/s, CPU per event: relay ${fmtInt(relayUs)} µs, receiver ${fmtInt(receiverUs)} µs; relay max RSS ${mb(r.rssMax)} MB${r.errors.length ? `; errors ${r.errors.join(' | ')}` : ''}; ${machine()}`);
        }
      }
      const med = (k: string, f: (x: { rate: number; relayUs: number; receiverUs: number }) => number): number => median(relay.get(k)!.map(f));
      printTable(
        ['relay drain, HTTP client', 'events/s (median)', 'per round', 'relay CPU µs/event (median)', 'receiver CPU µs/event (median)'],
        kinds.map((k) => [label(k), fmtInt(med(k, (x) => x.rate)), relay.get(k)!.map((x) => fmtInt(x.rate)).join(' / '), fmtInt(med(k, (x) => x.relayUs)), fmtInt(med(k, (x) => x.receiverUs))]),
      );
      summary(
        'http-clients',
        `relay drain of ${fmtInt(RELAY_EVENTS)}: undici ${fmtInt(med('http', (x) => x.rate))} events/s (relay ${fmtInt(med('http', (x) => x.relayUs))} µs/event), ` +
          `node:http ${fmtInt(med('http-node', (x) => x.rate))} events/s (relay ${fmtInt(med('http-node', (x) => x.relayUs))} µs/event)`,
      );
    });
  }
  log(`http-clients done: ${machine()}`);
} finally {
  receiver.child.send({ type: 'close' });
  await new Promise((resolve) => receiver.child.once('exit', resolve));
}
