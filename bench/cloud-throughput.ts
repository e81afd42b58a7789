/**
 * Pub/Sub (Google's emulator, scripts/pubsub/up.sh) and SQS FIFO (ElasticMQ,
 * scripts/sqs/up.sh) against their official SDKs, in one run, variants
 * interleaved round by round:
 *
 * - publish: the raw SDK (PubSub `topic.publishMessage` with ordering keys,
 *   flushed per call / SQS `SendMessageBatch` of 10, every batch of a call at
 *   once) in calls of BENCH_BATCH events of distinct keys, BENCH_LANES calls
 *   at once, the same encoded messages the transports send; against a relay
 *   (batch BENCH_BATCH, BENCH_LANES lanes) draining the same number of events
 *   from PostgreSQL through PubSubTransport / SqsTransport.
 * - consume: the raw SDK receiving and acking what was loaded (StreamingPull
 *   with the consumer's flow control, `ack()` / one ReceiveMessage loop of 10
 *   with DeleteMessageBatch sent without waiting), against PubSubConsumer /
 *   SqsConsumer with the PostgreSQL inbox, and with an in-memory inbox store
 *   (no database: the consumer's own cost). For SQS also the ceiling of any
 *   inbox consumer: the raw loop plus the inbox's own transaction
 *   (PostgresInboxStore.runBatch, a handler doing nothing) for each received
 *   batch, not waited for by the next receive, deleting after its commit; with BENCH_SQS_RECEIVERS above 1 the
 *   raw loop runs that many receives at once (the consumer's
 *   receiveConcurrency is BENCH_SQS_RECEIVE_CONCURRENCY, default its own).
 *
 * Timed from the start (of the relay, the consumer or the SDK's receiving)
 * until the last event was published or settled; stopping is not timed.
 * Prints events/s per round, p50/p99 (publish call; consumer handler-to-commit),
 * the process's CPU per event, max RSS and the load average. Figures are
 * bound by the emulators, which share the machine's cores.
 *
 *   bash scripts/pubsub/up.sh && bash scripts/sqs/up.sh
 *   node --conditions=txbox-source --import tsx bench/cloud-throughput.ts
 *   BENCH_BROKERS=sqs BENCH_PARTS=consume BENCH_ROUNDS=3 ...
 *
 * Settings: BENCH_BROKERS (pubsub,sqs), BENCH_PARTS (publish,consume), BENCH_ROUNDS (2),
 * BENCH_PUBSUB_EVENTS (10000), BENCH_SQS_EVENTS (4000), BENCH_KEYS (1000), BENCH_BATCH (500),
 * BENCH_LANES (2), BENCH_CONCURRENCY (consumers' `concurrency` with the PostgreSQL inbox, 16,64), BENCH_SQS_RECEIVERS (1),
 * BENCH_SQS_RECEIVE_CONCURRENCY, BENCH_SQS_MAX_IN_FLIGHT (the SqsConsumer's options; default: its defaults),
 * BENCH_WARMUP (1: one untimed pass of the raw receive loop before round 1; 0: none).
 */
import { randomBytes } from 'node:crypto';
import { DeleteMessageBatchCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageBatchCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { Message, PubSub } from '@google-cloud/pubsub';
import { createInbox, createRelay, uuidv7, type Inbox, type InboxStore, type OutboxEvent, type Transport } from 'txbox';
import { inboxNames, migrateInbox, PostgresInboxStore, PostgresRelayStore } from 'txbox/postgres';
import { buildPubSubMessage, PubSubConsumer, PubSubTransport } from 'txbox/pubsub';
import { decodeSqsMessage, encodeSqsMessage, SqsConsumer, SqsTransport } from 'txbox/sqs';
import { adminClient, EMULATOR_HOST, emulatorSkip, PROJECT } from '../test/helpers/pubsub.ts';
import { createQueue, deleteQueues, SQS_ENDPOINT, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../test/helpers/sqs.ts';
import { Backlog, fmtInt, log, machine, mb, memoryInboxStore, MemorySampler, orderPayload, percentile, perSec, printTable, summary, withBench, type Bench } from './lib.ts';

const BROKERS = (process.env.BENCH_BROKERS ?? 'pubsub,sqs').split(',');
const PARTS = (process.env.BENCH_PARTS ?? 'publish,consume').split(',');
const int = (name: string, fallback: number): number => Number(process.env[name] ?? fallback);
const ROUNDS = int('BENCH_ROUNDS', 2);
const KEYS = int('BENCH_KEYS', 1000);
const BATCH = int('BENCH_BATCH', 500);
const LANES = int('BENCH_LANES', 2);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '16,64').split(',').map(Number);
const SQS_RECEIVERS = int('BENCH_SQS_RECEIVERS', 1);
const WARMUP = int('BENCH_WARMUP', 1) > 0;
const optionalInt = (name: string): number | undefined => (process.env[name] ? Number(process.env[name]) : undefined);
const SQS_RECEIVE_CONCURRENCY = optionalInt('BENCH_SQS_RECEIVE_CONCURRENCY');
const SQS_MAX_IN_FLIGHT = optionalInt('BENCH_SQS_MAX_IN_FLIGHT');
const run = randomBytes(3).toString('hex');

interface Sample {
  readonly perSec: number;
  readonly latencies: number[];
  readonly cpuUsPerEvent: number;
  readonly maxRss: number;
}

/** Undoes what a run set up (a consumer's stop), after its clock stopped. */
type Cleanup = (() => Promise<void>) | void;

/**
 * Times `body` (which handles `events` events), with this process's CPU and
 * RSS; its cleanup (stopping a consumer: a long poll in progress, closing a
 * stream) runs after the clock stopped.
 */
async function measure(events: number, body: (latencies: number[]) => Promise<Cleanup>): Promise<Sample> {
  const latencies: number[] = [];
  const memory = new MemorySampler();
  const cpu = process.cpuUsage();
  const started = performance.now();
  const cleanup = await body(latencies);
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  memory.stop();
  await cleanup?.();
  return { perSec: perSec(events, ms), latencies, cpuUsPerEvent: (used.user + used.system) / events, maxRss: memory.maxRss };
}

/** `n` OrderPlaced events, round robin over KEYS keys, versions increasing per key. */
function makeEvents(n: number, destination: string): OutboxEvent[] {
  const occurredAt = new Date();
  return Array.from({ length: n }, (_, i) => {
    const k = i % KEYS;
    return { id: uuidv7(), type: 'OrderPlaced', aggregateType: 'Order', aggregateId: `c${k}`, key: `Order:c${k}`, destination, payload: orderPayload(i, k), headers: { 'content-type': 'application/json' }, occurredAt, version: Math.floor(i / KEYS) + 1 };
  });
}

/** Runs `call` over `items` in calls of BATCH, LANES calls at once (the relay's shape); records each call's duration. */
async function inCalls<T>(items: readonly T[], latencies: number[], call: (chunk: readonly T[]) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const chunk = items.slice(next, (next += BATCH));
      const t = performance.now();
      await call(chunk);
      latencies.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: LANES }, lane));
}

/** What differs between the two brokers. */
interface Broker {
  readonly name: string;
  readonly events: number;
  /** A fresh topic or queue for one publish run (no subscription: nothing reads it; FIFO deduplication cannot drop a re-published backlog). */
  publishTarget(): Promise<string>;
  rawPublish(target: string, events: readonly OutboxEvent[], latencies: number[]): Promise<void>;
  transport(target: string): Transport;
  /** Loads `events` for the consume part (not timed). */
  load(events: readonly OutboxEvent[]): Promise<void>;
  /** Resolves when `count` messages were received and acked (sent); the cleanup closes. */
  rawConsume(count: number): Promise<() => Promise<void>>;
  /** The raw loop with `store.runBatch` (the inbox's transaction) per received batch before its ack; null: not measured. */
  rawWithInbox: ((store: InboxStore, count: number) => Promise<() => Promise<void>>) | null;
  consumer(inbox: Inbox, concurrency: number): { start(): Promise<void>; stop(): Promise<void>; onSettled(fn: (durationMs: number) => void): void };
  close(): Promise<void>;
}

async function pubsubBroker(): Promise<Broker | null> {
  const skip = await emulatorSkip();
  if (skip) {
    log(`pubsub skipped: ${skip}`);
    return null;
  }
  const admin: PubSub = adminClient();
  const topic = `bench-cloud-${run}`;
  const [t] = await admin.createTopic(topic);
  const subscription = `${topic}-sub`;
  const created: string[] = [];
  let targets = 0;
  await t.createSubscription(subscription, { enableMessageOrdering: true, ackDeadlineSeconds: 60 });
  // The transport's batching and ordering, through the plain client.
  const rawTopic = (name: string) => admin.topic(name, { messageOrdering: true, batching: { maxMessages: 1000, maxBytes: 9_000_000, maxMilliseconds: 10 } });
  const publish = async (raw: ReturnType<typeof rawTopic>, events: readonly OutboxEvent[]): Promise<void> => {
    const sent = events.map((e) => {
      const built = buildPubSubMessage(e);
      if (!built.ok) throw new Error(built.reason);
      return raw.publishMessage({ data: built.message.data, attributes: built.message.attributes, orderingKey: built.message.orderingKey });
    });
    const acked = Promise.all(sent); // handled before the flush, so a failed publish is not an unhandled rejection
    await raw.flush();
    await acked;
  };
  return {
    name: 'Pub/Sub',
    events: int('BENCH_PUBSUB_EVENTS', 10_000),
    async publishTarget() {
      const name = `${topic}-p${++targets}`;
      await admin.createTopic(name);
      created.push(name);
      return name;
    },
    rawPublish: (target, events, latencies) => {
      const raw = rawTopic(target);
      return inCalls(events, latencies, (chunk) => publish(raw, chunk));
    },
    transport: (target) => new PubSubTransport({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, topics: { orders: target } }),
    async load(events) {
      const raw = rawTopic(topic);
      await inCalls(events, [], (chunk) => publish(raw, chunk));
    },
    rawWithInbox: null,
    async rawConsume(count) {
      const sub = admin.subscription(subscription, { flowControl: { maxMessages: 1000, allowExcessMessages: false } });
      let n = 0;
      await new Promise<void>((resolve, reject) => {
        sub.on('message', (m: Message) => {
          m.ack();
          if (++n === count) resolve();
        });
        sub.on('error', reject);
      });
      return () => sub.close();
    },
    consumer(inbox, concurrency) {
      const c = new PubSubConsumer({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, subscription, destination: 'orders', inbox, concurrency });
      return { start: () => c.start(), stop: () => c.stop(), onSettled: (fn) => c.events.on('settled', (s) => fn(s.durationMs)) };
    },
    async close() {
      await admin.subscription(subscription).delete().catch(() => {});
      await t.delete().catch(() => {});
      for (const name of created) await admin.topic(name).delete().catch(() => {});
      await admin.close();
    },
  };
}

async function sqsBroker(): Promise<Broker> {
  const admin: SQSClient = sqsClient();
  const dlq = await createQueue(admin, uniqueQueueName('bench-cloud-dlq', true));
  const { Attributes } = await admin.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ['QueueArn'] }));
  const url = await createQueue(admin, uniqueQueueName('bench-cloud', true), { VisibilityTimeout: '60', RedrivePolicy: JSON.stringify({ deadLetterTargetArn: Attributes!.QueueArn, maxReceiveCount: 10 }) });
  // SqsTransport's request shape through the plain client: the call's batches of 10 all at once.
  const publish = async (queue: string, events: readonly OutboxEvent[]): Promise<void> => {
    const sends: Promise<unknown>[] = [];
    for (let i = 0; i < events.length; i += 10) {
      const entries = events.slice(i, i + 10).map((e, n) => {
        const m = encodeSqsMessage(e, true);
        return { Id: `e${n}`, MessageBody: m.body, MessageAttributes: m.attributes, MessageGroupId: m.groupId, MessageDeduplicationId: m.deduplicationId };
      });
      sends.push(
        admin.send(new SendMessageBatchCommand({ QueueUrl: queue, Entries: entries })).then((out) => {
          if ((out.Failed ?? []).length > 0) throw new Error(`SendMessageBatch failed: ${JSON.stringify(out.Failed)}`);
        }),
      );
    }
    await Promise.all(sends);
  };
  const client = sqsClient();
  const created: string[] = [];
  /**
   * SQS_RECEIVERS receive loops of 10 that delete each batch without waiting;
   * with `store`, each batch's events are decoded and committed by the
   * inbox's own transaction (a handler doing nothing) while the loop receives
   * on, and the batch is deleted after its commit: no dispatcher, no per-key
   * order (a FIFO group's next messages come only after the delete anyway),
   * no Inbox around it; what any inbox consumer pays at least.
   */
  const rawSqs = async (count: number, store: InboxStore | null): Promise<() => Promise<void>> => {
    let n = 0;
    const deletes = new Set<Promise<unknown>>();
    const consumer = `bench-raw-${randomBytes(3).toString('hex')}`;
    const receiver = async (): Promise<void> => {
      while (n < count) {
        const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['ApproximateReceiveCount', 'MessageGroupId'] }));
        if (Messages.length === 0) continue;
        const remove = (): Promise<unknown> => client.send(new DeleteMessageBatchCommand({ QueueUrl: url, Entries: Messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle! })) }));
        let d: Promise<unknown>;
        if (store === null) d = remove();
        else {
          const events = Messages.map((m) => {
            const decoded = decodeSqsMessage(m, 'orders');
            if (!decoded.ok) throw new Error(decoded.message);
            return decoded.event;
          });
          // The next receive does not wait for the commit; the delete does.
          d = store.runBatch(consumer, events, async () => {}).then(remove);
        }
        const received = (n += Messages.length);
        if (store !== null && received >= count) await d; // timed until the last batch committed
        deletes.add(d);
        void d.finally(() => deletes.delete(d));
      }
    };
    await Promise.all(Array.from({ length: SQS_RECEIVERS }, receiver));
    return async () => void (await Promise.all([...deletes]));
  };
  return {
    name: 'SQS FIFO',
    events: int('BENCH_SQS_EVENTS', 4000),
    async publishTarget() {
      const queue = await createQueue(admin, uniqueQueueName('bench-cloud-p', true));
      created.push(queue);
      return queue;
    },
    rawPublish: (target, events, latencies) => inCalls(events, latencies, (chunk) => publish(target, chunk)),
    transport: (target) => new SqsTransport({ queues: { orders: target }, region: 'us-east-1', endpoint: SQS_ENDPOINT, credentials: TEST_CREDENTIALS }),
    async load(events) {
      await inCalls(events, [], (chunk) => publish(url, chunk));
    },
    rawConsume: (count) => rawSqs(count, null),
    rawWithInbox: (store, count) => rawSqs(count, store),
    consumer(inbox, concurrency) {
      const c = new SqsConsumer({
        queueUrl: url,
        region: 'us-east-1',
        endpoint: SQS_ENDPOINT,
        credentials: TEST_CREDENTIALS,
        destination: 'orders',
        inbox,
        concurrency,
        waitTimeSeconds: 1,
        ...(SQS_RECEIVE_CONCURRENCY === undefined ? {} : { receiveConcurrency: SQS_RECEIVE_CONCURRENCY }),
        ...(SQS_MAX_IN_FLIGHT === undefined ? {} : { maxInFlight: SQS_MAX_IN_FLIGHT }),
      });
      return { start: () => c.start(), stop: () => c.stop(), onSettled: (fn) => c.events.on('settled', (s) => fn(s.durationMs)) };
    },
    async close() {
      await deleteQueues(admin, [url, dlq, ...created]);
      admin.destroy();
      client.destroy();
    },
  };
}

/** Resolves when the relay published the whole backlog; the cleanup stops it. */
async function relayDrain(bench: Bench, backlog: Backlog, broker: Broker, target: string, latencies: number[]): Promise<() => Promise<void>> {
  let published = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  const relay = createRelay({ store: new PostgresRelayStore({ schema: bench.schema, connection: bench.connection }), transport: broker.transport(target), batchSize: BATCH, lanes: LANES, retention: false });
  relay.on('batch', (b) => {
    latencies.push(b.durationMs);
    published += b.published;
    if (published >= backlog.events) done();
  });
  relay.on('retry', (r) => log(`  retry: ${r.error}`));
  await relay.start();
  await finished;
  return () => relay.stop();
}

/** Resolves when `count` events settled (committed; the ack is sent next); the cleanup stops the consumer. */
async function consume(broker: Broker, store: InboxStore | null, concurrency: number, count: number, latencies: number[]): Promise<() => Promise<void>> {
  if (store === null) return broker.rawConsume(count);
  const inbox = createInbox({ store, consumer: `bench-${randomBytes(3).toString('hex')}` });
  inbox.on('OrderPlaced', async () => {});
  const c = broker.consumer(inbox, concurrency);
  let settled = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  c.onSettled((ms) => {
    latencies.push(ms);
    if (++settled === count) done();
  });
  await c.start();
  await finished;
  return () => c.stop();
}

await withBench('cloud', async (bench) => {
  await migrateInbox(bench.connection, inboxNames({ schema: bench.schema }));
  const brokers = [...(BROKERS.includes('pubsub') ? [await pubsubBroker()] : []), ...(BROKERS.includes('sqs') ? [await sqsBroker()] : [])].filter((b): b is Broker => b !== null);
  const rows: string[][] = [];
  try {
    for (const broker of brokers) {
      const variants: { part: string; name: string; run: (latencies: number[]) => Promise<Cleanup>; before?: () => Promise<void> }[] = [];
      let backlog: Backlog | null = null;
      if (PARTS.includes('publish')) {
        await bench.sql(`DROP TABLE IF EXISTS "${bench.schema}".backlog`);
        backlog = await Backlog.create(bench, broker.events, KEYS);
        let target = '';
        const fresh = async (): Promise<void> => void (target = await broker.publishTarget());
        variants.push({ part: 'publish', name: `raw SDK publish, calls of ${BATCH}, ${LANES} at once`, before: fresh, run: (l) => broker.rawPublish(target, makeEvents(broker.events, 'orders'), l) });
        variants.push({
          part: 'publish',
          name: `relay drain from PostgreSQL (batch ${BATCH}, ${LANES} lanes)`,
          before: async () => {
            await fresh();
            await backlog!.restore();
          },
          run: (l) => relayDrain(bench, backlog!, broker, target, l),
        });
      }
      if (PARTS.includes('consume')) {
        const load = async (): Promise<void> => {
          await bench.sql(`TRUNCATE "${bench.schema}".inbox`);
          await broker.load(makeEvents(broker.events, 'orders'));
        };
        variants.push({ part: 'consume', name: 'raw SDK receive + ack', before: load, run: () => consume(broker, null, 0, broker.events, []) });
        if (broker.rawWithInbox) {
          const rawWithInbox = broker.rawWithInbox;
          variants.push({ part: 'consume', name: 'raw SDK receive + inbox transaction per receive (runBatch), ack after commit', before: load, run: () => rawWithInbox(new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), broker.events) });
        }
        for (const c of CONCURRENCY) {
          variants.push({ part: 'consume', name: `consumer, PostgreSQL inbox, concurrency ${c}`, before: load, run: (l) => consume(broker, new PostgresInboxStore({ connection: bench.connection, schema: bench.schema }), c, broker.events, l) });
        }
        variants.push({ part: 'consume', name: `consumer, in-memory inbox store (no database), concurrency ${CONCURRENCY[0]}`, before: load, run: (l) => consume(broker, memoryInboxStore(), CONCURRENCY[0]!, broker.events, l) });
      }
      const samples = variants.map(() => [] as Sample[]);
      if (WARMUP && PARTS.includes('consume')) {
        // Untimed: the first variant of round 1 (the raw loop) would otherwise run with a cold JIT and a cold SDK.
        const raw = variants.find((v) => v.part === 'consume')!;
        await raw.before?.();
        await measure(broker.events, raw.run);
        log(`${broker.name}: warm-up pass done (not counted)`);
      }
      for (let round = 0; round < ROUNDS; round++) {
        for (const [i, v] of variants.entries()) {
          await v.before?.();
          const s = await measure(broker.events, v.run);
          samples[i]!.push(s);
          log(`${broker.name} ${v.part}, round ${round + 1}: ${v.name}: ${fmtInt(s.perSec)} events/s, CPU ${fmtInt(s.cpuUsPerEvent)} µs/event (${machine()})`);
        }
      }
      for (const [i, v] of variants.entries()) {
        const s = samples[i]!;
        const ceiling = samples[v.part === 'publish' ? 0 : variants.findIndex((x) => x.part === 'consume')]!;
        const ratios = s.map((x, r) => `${Math.round((x.perSec / ceiling[r]!.perSec) * 100)}%`);
        const latencies = s.flatMap((x) => x.latencies).sort((a, b) => a - b);
        rows.push([
          broker.name,
          v.name,
          s.map((x) => fmtInt(x.perSec)).join(' / '),
          ratios.join(' / '),
          latencies.length ? `${percentile(latencies, 50).toFixed(1)} / ${percentile(latencies, 99).toFixed(1)}` : '',
          s.map((x) => fmtInt(x.cpuUsPerEvent)).join(' / '),
          mb(Math.max(...s.map((x) => x.maxRss))),
        ]);
      }
    }
  } finally {
    for (const b of brokers) await b.close();
  }
  console.log(`\n${ROUNDS} rounds, variants interleaved; ${KEYS} keys; ${machine()}`);
  printTable(['broker', 'variant', 'events/s per round', 'of raw, per round', 'p50 / p99 ms', 'CPU µs/event', 'max RSS MB'], rows);
  console.log('p50 / p99: a publish call (raw), a relay batch (relay), handler start to commit (consumers).');
  summary('cloud-throughput', rows.map((r) => `${r[0]} ${r[1]} ${r[2]} (${r[3]})`).join('; '));
});
