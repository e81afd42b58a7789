/**
 * The Kafka transport through the transport conformance suite, against the
 * real single-node KRaft broker of scripts/kafka (started or reused here).
 * Each destination is a fresh topic with 6 partitions; they are deleted at
 * the end. Kafka files share one broker and this one kills it, so they take
 * a lock (see holdBrokerLock) and run one at a time.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before } from 'node:test';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { KafkaTransport, parseKafkaMessage } from 'txbox/kafka';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { holdBrokerLock } from '../helpers/broker-lock.ts';

const SCRIPTS = new URL('../../scripts/kafka/', import.meta.url).pathname;
const run = (script: string): void => void execFileSync('bash', [join(SCRIPTS, script)], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 240_000 });
const kafka = new Kafka({ brokers: ['127.0.0.1:9092'], clientId: 'txbox-conformance', logLevel: logLevel.NOTHING });
const suffix = randomBytes(4).toString('hex');
const created: string[] = [];
let admin: Admin;
let counter = 0;
let releaseLock = (): void => {};

before(async () => {
  releaseLock = await holdBrokerLock('kafka');
  run('up.sh');
  admin = kafka.admin();
  await admin.connect();
});

after(() => releaseLock());

runTransportConformance({
  name: 'kafka',
  databaseUrl: DATABASE_URL,
  events: 10_000,
  broker: {
    // Kafka drops a re-send only inside one idempotent producer session, when the client itself retries a
    // request; an event published twice by the relay (a new send) is stored twice. Consumers dedup by txbox-id.
    dedup: 'none',
    oversizeBytes: 1536 * 1024,
    async createDestination() {
      const topic = `txbox-conf-${suffix}-${++counter}`;
      await withAdmin((a) => a.createTopics({ topics: [{ topic, numPartitions: 6 }], waitForLeaders: true }));
      created.push(topic);
      return topic;
    },
    createTransport() {
      return new KafkaTransport({ clientId: 'txbox-conformance' });
    },
    readBack,
    async restart() {
      run('kill.sh');
      run('up.sh');
    },
    async unroutableDestination() {
      // Never created. The broker has auto.create.topics.enable=true (scripts/kafka/up.sh); the transport
      // asks with allowAutoTopicCreation off and checks the topic with the admin client first, so it stays missing.
      return `txbox-missing-${suffix}-${++counter}`;
    },
    misconfigured() {
      return [
        { transport: new KafkaTransport({ brokers: ['127.0.0.1:1'], connectionTimeoutMs: 1000 }), setting: /brokers/ },
        // The broker has only a PLAINTEXT listener: a SASL handshake there is refused (ILLEGAL_SASL_STATE), which
        // is the error a client with SASL configured meets at a listener that does not take it. A wrong password at
        // a real SASL listener is covered against a scripted broker in test/unit/kafka-sasl.test.ts.
        {
          transport: new KafkaTransport({ sasl: { mechanism: 'scram-sha-512', username: 'relay', password: 'hunter2' } }),
          setting: /sasl/,
        },
      ];
    },
    async close() {
      const existing = await withAdmin((a) => a.listTopics());
      const mine = created.filter((t) => existing.includes(t));
      if (mine.length > 0) await withAdmin((a) => a.deleteTopics({ topics: mine, timeout: 30_000 }));
      const leaked = existing.filter((t) => t.startsWith(`txbox-missing-${suffix}`));
      await admin.disconnect();
      if (leaked.length > 0) throw new Error(`unroutable topics were created: ${leaked.join(', ')}`);
    },
  },
});

/**
 * Waits until the topic holds `expected` distinct events (or, when it holds
 * `expected` records counting duplicates, until nothing new arrived for 5 s),
 * then returns every record, partition by partition in offset order.
 */
async function readBack(topic: string, expected: number, timeoutMs: number): Promise<Delivered[]> {
  const deadline = Date.now() + timeoutMs;
  let lastTotal = -1;
  let stableSince = Date.now();
  for (;;) {
    const total = await recordCount(topic).catch(() => -1);
    if (total !== lastTotal) {
      lastTotal = total;
      stableSince = Date.now();
    }
    const settled = total >= expected && Date.now() - stableSince >= 5000;
    if (total >= expected || Date.now() >= deadline) {
      const got = await readTopic(topic).catch(() => null);
      if (got !== null && (new Set(got.map((d) => d.id)).size >= expected || settled || Date.now() >= deadline)) return got;
    }
    if (Date.now() >= deadline) return [];
    await sleep(250);
  }
}

async function recordCount(topic: string): Promise<number> {
  const offsets = await withAdmin((a) => a.fetchTopicOffsets(topic));
  return offsets.reduce((n, o) => n + Number(o.high) - Number(o.low), 0);
}

/** Every record of the topic up to the current high watermarks, read by a throwaway consumer group. */
async function readTopic(topic: string): Promise<Delivered[]> {
  const offsets = await withAdmin((a) => a.fetchTopicOffsets(topic));
  const target = new Map(offsets.filter((o) => Number(o.high) > Number(o.low)).map((o) => [o.partition, Number(o.high)]));
  const partitions = new Map<number, Delivered[]>([...target.keys()].map((p) => [p, []]));
  if (target.size === 0) return [];
  const groupId = `txbox-readback-${randomBytes(6).toString('hex')}`;
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100, retry: { retries: 3 } });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`reading ${topic} back took over 60 s`)), 60_000);
      const remaining = new Set(target.keys());
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const end = target.get(batch.partition);
            const list = partitions.get(batch.partition);
            if (end === undefined || list === undefined) return;
            for (const m of batch.messages) {
              if (Number(m.offset) >= end) break;
              const parsed = parseKafkaMessage(m, topic);
              list.push(parsed.ok ? { id: parsed.event.id, key: parsed.event.key } : { id: `unparsable@${m.offset}`, key: '' });
              if (Number(m.offset) + 1 >= end) remaining.delete(batch.partition);
            }
            if (remaining.size === 0) {
              clearTimeout(timer);
              resolve();
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
    await withAdmin((a) => a.deleteGroups([groupId])).catch(() => {});
  }
  return [...partitions.values()].flat();
}

/** Runs an admin call, reconnecting once if the broker was restarted under the admin client. */
async function withAdmin<T>(fn: (a: Admin) => Promise<T>): Promise<T> {
  try {
    return await fn(admin);
  } catch {
    await admin.disconnect().catch(() => {});
    admin = kafka.admin();
    await admin.connect();
    return fn(admin);
  }
}


