/**
 * Kafka client shoot-out for the txbox relay (see docs/transports/kafka-client-choice.md).
 *
 * Every client is configured the way an outbox relay uses it: idempotent producer,
 * acks=all (-1), a key on every message (100 distinct keys), 3 headers and a
 * ~300-byte JSON value; messages go out in batches of --batch with up to
 * --inflight batches awaiting their ack at once.
 *
 * Needs a broker on 127.0.0.1:9092 (scripts/kafka/up.sh) and the client under test:
 *   npx tsx bench/kafka-clients.ts --client kafkajs      [--messages 200000 --batch 500 --inflight 5]
 *   npx tsx bench/kafka-clients.ts --client platformatic --inflight 1
 *   npx tsx bench/kafka-clients.ts --client confluent            # its KafkaJS-compatible API
 *   npx tsx bench/kafka-clients.ts --client confluent-native     # its node-rdkafka style API
 *   npx tsx bench/kafka-clients.ts --client kafkajs --mode errors   # error classification probes
 *   npx tsx bench/kafka-clients.ts --client kafkajs --mode fault    # kill -9 the broker mid-run
 *
 * Prints one human line and one `RESULT {json}` line. Exit code 0 unless the run crashed.
 * Each client is loaded with a dynamic import, so only the one being run must be installed.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

type ClientName = 'kafkajs' | 'confluent' | 'confluent-native' | 'platformatic';

interface OutMessage {
  key: Buffer;
  value: Buffer;
  headers: Record<string, Buffer>;
}

interface Adapter {
  readonly name: ClientName;
  readonly version: string;
  connect(): Promise<void>;
  createTopic(topic: string, partitions: number): Promise<void>;
  send(topic: string, messages: OutMessage[]): Promise<void>;
  /** Sum of the high watermarks of all partitions (= records in the topic). */
  countRecords(topic: string): Promise<number>;
  close(): Promise<void>;
  /** Producer for error probes; `autoCreate` toggles client-side topic auto-creation. */
  probeProducer(autoCreate: boolean): Promise<{ send(topic: string, m: OutMessage[]): Promise<void>; close(): Promise<void> }>;
}

// ---------------------------------------------------------------- args

const argv = process.argv.slice(2);
function arg(name: string, dflt: string): string {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1]! : dflt;
}
const CLIENT = arg('client', 'kafkajs') as ClientName;
const MODE = arg('mode', 'bench') as 'bench' | 'errors' | 'fault';
const BROKER = arg('broker', process.env.KAFKA_BROKER ?? '127.0.0.1:9092');
const TOTAL = Number(arg('messages', MODE === 'fault' ? '60000' : '200000'));
const BATCH = Number(arg('batch', '500'));
const INFLIGHT = Number(arg('inflight', '5'));
const PARTITIONS = Number(arg('partitions', '6'));
const KEYS = Number(arg('keys', '100'));
const KAFKA_SCRIPTS =
  process.env.TXBOX_KAFKA_SCRIPTS ?? resolve(dirname(fileURLToPath(import.meta.url)), '../scripts/kafka');

// ---------------------------------------------------------------- messages

const RUN_ID = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
const BASE_TS = Date.UTC(2026, 0, 1);
const NOTE = 'x'.repeat(64);

function makeMessage(i: number): OutMessage {
  const aggregateId = `order-${i % KEYS}`;
  const id = `${RUN_ID}-${i.toString().padStart(9, '0')}`;
  const value = JSON.stringify({
    id,
    aggregateType: 'order',
    aggregateId,
    type: 'OrderPlaced',
    occurredAt: new Date(BASE_TS + i).toISOString(),
    payload: {
      seq: i,
      customerId: `cust-${(i * 7919) % 100_000}`,
      sku: `SKU-${i % 1000}`,
      qty: (i % 7) + 1,
      priceCents: 1999 + (i % 50),
      currency: 'EUR',
      note: NOTE,
    },
  });
  return {
    key: Buffer.from(aggregateId),
    value: Buffer.from(value),
    headers: {
      'txbox-id': Buffer.from(id),
      'txbox-type': Buffer.from('OrderPlaced'),
      traceparent: Buffer.from('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'),
    },
  };
}

function makeBatch(b: number, size = BATCH): OutMessage[] {
  const out = new Array<OutMessage>(size);
  for (let j = 0; j < size; j++) out[j] = makeMessage(b * BATCH + j);
  return out;
}

// ---------------------------------------------------------------- adapters

/** Import by a runtime string so the type checker does not need every client installed. */
const load = (specifier: string): Promise<any> => import(specifier);

/** Installed version of a package (its package.json is often not in "exports"). */
function pkgVersion(name: string): string {
  let dir = dirname(createRequire(import.meta.url).resolve(name));
  for (;;) {
    const f = join(dir, 'package.json');
    if (existsSync(f)) {
      const j = JSON.parse(readFileSync(f, 'utf8'));
      if (j.name === name) return j.version;
    }
    const up = dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

async function kafkajsAdapter(): Promise<Adapter> {
  const mod: any = await load('kafkajs');
  const { Kafka, logLevel } = mod.default ?? mod;
  const version = pkgVersion('kafkajs');
  const kafka = new Kafka({ clientId: 'txbox-bench', brokers: [BROKER], logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  const mkProducer = (autoCreate: boolean) =>
    kafka.producer({ idempotent: true, maxInFlightRequests: 5, allowAutoTopicCreation: autoCreate });
  const producer = mkProducer(true);
  const toMsgs = (m: OutMessage[]) => m.map((x) => ({ key: x.key, value: x.value, headers: x.headers }));
  return {
    name: 'kafkajs',
    version,
    async connect() {
      await admin.connect();
      await producer.connect();
    },
    async createTopic(topic, partitions) {
      await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true });
    },
    async send(topic, messages) {
      await producer.send({ topic, acks: -1, messages: toMsgs(messages) });
    },
    async countRecords(topic) {
      const offs = await admin.fetchTopicOffsets(topic);
      return offs.reduce((s: number, p: any) => s + Number(p.high), 0);
    },
    async close() {
      await producer.disconnect();
      await admin.disconnect();
    },
    async probeProducer(autoCreate) {
      const p = mkProducer(autoCreate);
      await p.connect();
      return {
        send: (topic, m) => p.send({ topic, acks: -1, messages: toMsgs(m) }),
        close: () => p.disconnect(),
      };
    },
  };
}

async function confluentAdapter(): Promise<Adapter> {
  const mod: any = await load('@confluentinc/kafka-javascript');
  const { KafkaJS } = mod.default ?? mod;
  const version = pkgVersion('@confluentinc/kafka-javascript');
  const kafka = new KafkaJS.Kafka({ kafkaJS: { clientId: 'txbox-bench', brokers: [BROKER], logLevel: KafkaJS.logLevel.NOTHING } });
  const admin = kafka.admin();
  const mkProducer = (autoCreate: boolean) =>
    kafka.producer({
      kafkaJS: { idempotent: true, acks: -1, maxInFlightRequests: 5, allowAutoTopicCreation: autoCreate },
      'linger.ms': 5,
    });
  const producer = mkProducer(true);
  const toMsgs = (m: OutMessage[]) => m.map((x) => ({ key: x.key, value: x.value, headers: x.headers }));
  return {
    name: 'confluent',
    version: `${version} (librdkafka ${mod.librdkafkaVersion ?? mod.default?.librdkafkaVersion})`,
    async connect() {
      await admin.connect();
      await producer.connect();
    },
    async createTopic(topic, partitions) {
      await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }] });
    },
    async send(topic, messages) {
      await producer.send({ topic, messages: toMsgs(messages) });
    },
    async countRecords(topic) {
      const offs = await admin.fetchTopicOffsets(topic);
      return offs.reduce((s: number, p: any) => s + Number(p.high), 0);
    },
    async close() {
      await producer.disconnect();
      await admin.disconnect();
    },
    async probeProducer(autoCreate) {
      const p = mkProducer(autoCreate);
      await p.connect();
      return {
        send: (topic, m) => p.send({ topic, messages: toMsgs(m) }),
        close: () => p.disconnect(),
      };
    },
  };
}

/** Same package, node-rdkafka style API: produce() + delivery-report events, no per-message promises. */
async function confluentNativeAdapter(): Promise<Adapter> {
  const base = await confluentAdapter(); // for admin (createTopic/countRecords) and probes
  const mod: any = await load('@confluentinc/kafka-javascript');
  const { Producer } = mod.default ?? mod;
  const mkProducer = (autoCreate: boolean) =>
    new Producer({
      'bootstrap.servers': BROKER,
      'client.id': 'txbox-bench',
      'enable.idempotence': true,
      acks: 'all',
      'max.in.flight.requests.per.connection': 5,
      'linger.ms': 5,
      'allow.auto.create.topics': autoCreate,
      dr_cb: true,
    });
  const connect = (p: any) =>
    new Promise<void>((res, rej) => p.connect({}, (err: unknown) => (err ? rej(err) : res())));
  const producer = mkProducer(true);
  type Pending = { left: number; err?: unknown; done: (e?: unknown) => void };
  producer.on('delivery-report', (err: unknown, report: { opaque: Pending }) => {
    const b = report.opaque;
    if (err && !b.err) b.err = err;
    if (--b.left === 0) b.done(b.err);
  });
  const send = async (p: any, topic: string, messages: OutMessage[]) => {
    await new Promise<void>((resolve, reject) => {
      const pending: Pending = { left: messages.length, done: (e) => (e ? reject(e) : resolve()) };
      for (const m of messages) {
        const headers = Object.entries(m.headers).map(([k, v]) => ({ [k]: v }));
        for (;;) {
          try {
            p.produce(topic, null, m.value, m.key, Date.now(), pending, headers);
            break;
          } catch (e: any) {
            // local queue full: let librdkafka drain (real relays would back off here too)
            if (e?.code !== -184) throw e; // ERR__QUEUE_FULL
            p.poll();
          }
        }
      }
    });
  };
  return {
    ...base,
    name: 'confluent-native',
    async connect() {
      await base.connect();
      await connect(producer);
      producer.setPollInterval(5);
    },
    send: (topic, messages) => send(producer, topic, messages),
    async close() {
      await new Promise<void>((r) => producer.disconnect(() => r()));
      await base.close();
    },
    async probeProducer(autoCreate) {
      const p = mkProducer(autoCreate);
      p.on('delivery-report', (err: unknown, report: { opaque: Pending }) => {
        const b = report.opaque;
        if (err && !b.err) b.err = err;
        if (--b.left === 0) b.done(b.err);
      });
      await connect(p);
      p.setPollInterval(5);
      return { send: (topic, m) => send(p, topic, m), close: () => new Promise<void>((r) => p.disconnect(() => r())) };
    },
  };
}

async function platformaticAdapter(): Promise<Adapter> {
  const mod: any = await load('@platformatic/kafka');
  const { Producer, Admin, ProduceAcks } = mod;
  const version = pkgVersion('@platformatic/kafka');
  const admin = new Admin({ clientId: 'txbox-bench-admin', bootstrapBrokers: [BROKER] });
  const mkProducer = (autoCreate: boolean) =>
    new Producer({
      clientId: 'txbox-bench',
      bootstrapBrokers: [BROKER],
      idempotent: true,
      acks: ProduceAcks.ALL,
      autocreateTopics: autoCreate,
    });
  const producer = mkProducer(true);
  // Without serializers this client wants Buffers everywhere, header keys included
  // (a string header key makes send() throw inside the retry loop, see the doc).
  const hk = new Map<string, Buffer>();
  const hkey = (k: string) => hk.get(k) ?? (hk.set(k, Buffer.from(k)), hk.get(k)!);
  const toMsgs = (topic: string, m: OutMessage[]) =>
    m.map((x) => ({
      topic,
      key: x.key,
      value: x.value,
      headers: new Map(Object.entries(x.headers).map(([k, v]) => [hkey(k), v] as [Buffer, Buffer])),
    }));
  return {
    name: 'platformatic',
    version,
    async connect() {
      /* connects lazily */
    },
    async createTopic(topic, partitions) {
      await admin.createTopics({ topics: [topic], partitions, replicas: 1 });
    },
    async send(topic, messages) {
      await producer.send({ messages: toMsgs(topic, messages) });
    },
    async countRecords(topic) {
      const res = await admin.listOffsets({
        topics: [{ name: topic, partitions: Array.from({ length: PARTITIONS }, (_, i) => ({ partitionIndex: i, timestamp: -1n })) }],
      });
      return res[0].partitions.reduce((s: number, p: any) => s + Number(p.offset), 0);
    },
    async close() {
      await producer.close();
      await admin.close();
    },
    async probeProducer(autoCreate) {
      const p = mkProducer(autoCreate);
      return {
        send: async (topic, m) => {
          await p.send({ messages: toMsgs(topic, m) });
        },
        close: () => p.close(),
      };
    },
  };
}

async function loadAdapter(name: ClientName): Promise<Adapter> {
  if (name === 'kafkajs') return kafkajsAdapter();
  if (name === 'confluent') return confluentAdapter();
  if (name === 'confluent-native') return confluentNativeAdapter();
  if (name === 'platformatic') return platformaticAdapter();
  throw new Error(`unknown --client ${name}`);
}

// ---------------------------------------------------------------- helpers

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function rssSampler() {
  let peak = process.memoryUsage.rss();
  const t = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 50);
  t.unref();
  return {
    stop() {
      clearInterval(t);
      return { peakMB: Math.round(Math.max(peak, process.memoryUsage.rss()) / 1048576), endMB: Math.round(process.memoryUsage.rss() / 1048576) };
    },
  };
}

function describeError(e: any, depth = 0): Record<string, unknown> {
  const inner = e?.errors?.[0] ?? e?.cause;
  return {
    class: e?.constructor?.name,
    code: e?.code,
    type: e?.type,
    // kafkajs / confluent KafkaJS API: retriable; platformatic: canRetry; librdkafka: isRetriable
    retriable: e?.retriable ?? e?.canRetry ?? e?.isRetriable,
    fatal: e?.fatal ?? e?.isFatal,
    message: String(e?.message ?? e).slice(0, 160),
    inner: inner && depth < 3 ? describeError(inner, depth + 1) : undefined,
  };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | 'TIMEOUT'> {
  let t: NodeJS.Timeout;
  return Promise.race([p, new Promise<'TIMEOUT'>((r) => (t = setTimeout(() => r('TIMEOUT'), ms)))]).finally(() => clearTimeout(t));
}

/** CPU seconds used so far by the local broker (if we can find its pid), else NaN. */
function brokerCpuSecs(): number {
  try {
    const pidFile =
      process.env.TXBOX_KAFKA_PIDFILE ??
      join(process.env.TXBOX_KAFKA_HOME ?? join(process.env.HOME ?? '', '.cache/txbox-kafka'), `broker-${BROKER.split(':')[1]}`, 'kafka.pid');
    const pid = readFileSync(pidFile, 'utf8').trim();
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in clock ticks (USER_HZ=100)
  } catch {
    return NaN;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- modes

async function bench(a: Adapter) {
  const topic = `bench-${a.name}-${RUN_ID}`;
  await a.connect();
  await a.createTopic(topic, PARTITIONS);
  const nBatches = Math.ceil(TOTAL / BATCH);
  // warm-up batch (connections, metadata, producer id) - counted in the topic, not in the timing
  await a.send(topic, makeBatch(nBatches, BATCH));
  const lat: number[] = [];
  const errors: Record<string, unknown>[] = [];
  const rss = rssSampler();
  let next = 0;
  const cpu0 = process.cpuUsage();
  const broker0 = brokerCpuSecs();
  const t0 = performance.now();
  async function worker() {
    for (;;) {
      const b = next++;
      if (b >= nBatches) return;
      const msgs = makeBatch(b, Math.min(BATCH, TOTAL - b * BATCH));
      const ts = performance.now();
      try {
        await a.send(topic, msgs);
      } catch (e) {
        errors.push(describeError(e));
      }
      lat.push(performance.now() - ts);
    }
  }
  await Promise.all(Array.from({ length: INFLIGHT }, worker));
  const secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuSecs = (cpu.user + cpu.system) / 1e6;
  const brokerSecs = brokerCpuSecs() - broker0;
  const mem = rss.stop();
  lat.sort((x, y) => x - y);
  const inTopic = await a.countRecords(topic);
  const expected = TOTAL + BATCH;
  const result = {
    client: a.name,
    version: a.version,
    messages: TOTAL,
    batch: BATCH,
    inflight: INFLIGHT,
    seconds: +secs.toFixed(2),
    msgsPerSec: Math.round(TOTAL / secs),
    batchAckP50ms: +pct(lat, 50).toFixed(1),
    batchAckP99ms: +pct(lat, 99).toFixed(1),
    clientCpuSecs: +cpuSecs.toFixed(2),
    clientCpuPct: Math.round((cpuSecs / secs) * 100),
    brokerCpuPct: Number.isNaN(brokerSecs) ? undefined : Math.round((brokerSecs / secs) * 100),
    rssPeakMB: mem.peakMB,
    rssEndMB: mem.endMB,
    recordsInTopic: inTopic,
    expectedRecords: expected,
    lostOrDuplicated: inTopic - expected,
    sendErrors: errors.length,
    firstError: errors[0],
  };
  console.log(
    `${a.name.padEnd(12)} inflight=${INFLIGHT} ${result.msgsPerSec} msg/s  p50=${result.batchAckP50ms}ms p99=${result.batchAckP99ms}ms  ` +
      `cpu=${result.clientCpuPct}% broker=${result.brokerCpuPct ?? '?'}%  rss peak=${mem.peakMB}MB  records=${inTopic}/${expected}${errors.length ? `  errors=${errors.length}` : ''}`,
  );
  console.log(`RESULT ${JSON.stringify(result)}`);
  await a.close();
}

async function errorProbes(a: Adapter) {
  await a.connect();
  const out: Record<string, unknown> = { client: a.name, version: a.version };
  const probe = async (label: string, autoCreate: boolean, topic: string, msgs: OutMessage[], timeoutMs: number) => {
    const p = await a.probeProducer(autoCreate);
    const t0 = performance.now();
    try {
      const r = await withTimeout(p.send(topic, msgs), timeoutMs);
      out[label] = r === 'TIMEOUT' ? { outcome: `no result within ${timeoutMs} ms (still retrying)` } : { outcome: 'ok' };
    } catch (e) {
      out[label] = { outcome: 'error', afterMs: Math.round(performance.now() - t0), ...describeError(e) };
    }
    await withTimeout(p.close(), 5000).catch(() => undefined);
  };
  const existing = `probe-${a.name}-${RUN_ID}`;
  await a.createTopic(existing, 1);
  const big = makeMessage(0);
  big.value = Buffer.alloc(2 * 1024 * 1024, 0x61); // > broker message.max.bytes (1 MiB)
  await probe('messageTooLarge', true, existing, [big], 15000);
  await probe('invalidTopicName', true, 'bad topic name!', [makeMessage(0)], 15000);
  await probe('unknownTopicNoAutoCreate', false, `missing-${RUN_ID}`, [makeMessage(0)], 45000);
  console.log(`RESULT ${JSON.stringify(out, null, 1)}`);
  await withTimeout(a.close(), 5000);
}

/** kill -9 the broker a moment into the run, restart it, and see what the client does. */
async function fault(a: Adapter) {
  const topic = `fault-${a.name}-${RUN_ID}`;
  await a.connect();
  await a.createTopic(topic, PARTITIONS);
  const nBatches = Math.ceil(TOTAL / BATCH);
  const errors: Record<string, unknown>[] = [];
  let acked = 0;
  let killedAt = 0;
  let restartedAt = 0;
  let firstAckAfterRestart = 0;
  const t0 = performance.now();
  const chaos = (async () => {
    while (acked < TOTAL / 4) await sleep(20);
    execFileSync(`${KAFKA_SCRIPTS}/kill.sh`, { stdio: 'ignore' });
    killedAt = performance.now() - t0;
    await sleep(2000);
    execFileSync(`${KAFKA_SCRIPTS}/up.sh`, { stdio: 'ignore' });
    restartedAt = performance.now() - t0;
  })();
  let next = 0;
  const deadline = performance.now() + 180_000;
  async function worker() {
    for (;;) {
      const b = next++;
      if (b >= nBatches) return;
      const msgs = makeBatch(b, Math.min(BATCH, TOTAL - b * BATCH));
      // relay semantics: retry the same batch until acked (at-least-once)
      for (;;) {
        try {
          const r = await withTimeout(a.send(topic, msgs), 60_000);
          if (r === 'TIMEOUT') throw new Error('send() did not settle within 60 s');
          acked += msgs.length;
          if (restartedAt && !firstAckAfterRestart) firstAckAfterRestart = performance.now() - t0;
          break;
        } catch (e) {
          if (errors.length < 500) errors.push(describeError(e));
          if (performance.now() > deadline) throw new Error('fault run exceeded 180 s');
          await sleep(500);
        }
      }
    }
  }
  await Promise.all(Array.from({ length: INFLIGHT }, worker));
  await chaos;
  const secs = (performance.now() - t0) / 1000;
  const inTopic = await a.countRecords(topic);
  const kinds = new Map<string, number>();
  for (const e of errors) {
    const leaf = (x: any): any => (x?.inner ? leaf(x.inner) : x);
    const l = leaf(e);
    const k = `${e.class}>${l.class}:${l.type ?? l.code ?? ''}:retriable=${l.retriable}`;
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  const result = {
    client: a.name,
    inflight: INFLIGHT,
    messages: TOTAL,
    seconds: +secs.toFixed(1),
    killedAtS: +(killedAt / 1000).toFixed(1),
    brokerBackAtS: +(restartedAt / 1000).toFixed(1),
    firstAckAfterRestartS: +(firstAckAfterRestart / 1000).toFixed(1),
    sendErrors: errors.length,
    errorKinds: Object.fromEntries(kinds),
    sampleError: errors[0],
    recordsInTopic: inTopic,
    duplicates: inTopic - TOTAL,
  };
  console.log(`RESULT ${JSON.stringify(result, null, 1)}`);
  await withTimeout(a.close(), 10_000);
}

const adapter = await loadAdapter(CLIENT);
if (MODE === 'bench') await bench(adapter);
else if (MODE === 'errors') await errorProbes(adapter);
else if (MODE === 'fault') await fault(adapter);
else throw new Error(`unknown --mode ${MODE}`);
process.exit(0);
