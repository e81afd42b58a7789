/**
 * KafkaTransport against the real broker of scripts/kafka, beyond the
 * conformance suite: the message as consumers see it, a record the broker
 * refuses inside a multi-partition send (and why the transport replaces its
 * producer afterwards), topic existence, and outages simulated with a
 * socket factory (refused connections, a black hole) that must end in
 * retriable outcomes within the caller's signal.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import kafkajs, { Kafka, Partitioners, logLevel, type Admin, type ISocketFactory, type KafkaMessage } from 'kafkajs';
import type { Logger, OutboxEvent } from 'txbox';
import { KafkaTransport, parseKafkaMessage } from 'txbox/kafka';
import { holdBrokerLock } from '../helpers/broker-lock.ts';

const SCRIPTS = new URL('../../scripts/kafka/', import.meta.url).pathname;
const kafka = new Kafka({ brokers: ['127.0.0.1:9092'], clientId: 'txbox-kafka-test', logLevel: logLevel.NOTHING });
const suffix = randomBytes(4).toString('hex');
const created: string[] = [];
let admin: Admin;
let counter = 0;
let releaseLock = (): void => {};

async function newTopic(partitions = 6, configEntries: { name: string; value: string }[] = []): Promise<string> {
  const topic = `txbox-test-${suffix}-${++counter}`;
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, configEntries }], waitForLeaders: true });
  created.push(topic);
  return topic;
}

function event(destination: string, key: string, payload: unknown = { n: 1 }): OutboxEvent {
  return {
    id: randomUUID(),
    type: 'ItemChanged',
    aggregateType: 'Item',
    aggregateId: key,
    key: `Item:${key}`,
    destination,
    payload,
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date(),
    version: 3,
  };
}

const signal = (ms = 15_000): AbortSignal => AbortSignal.timeout(ms);

describe('KafkaTransport on the real broker', { timeout: 240_000 }, () => {
  before(async () => {
    releaseLock = await holdBrokerLock('kafka');
    execFileSync('bash', [join(SCRIPTS, 'up.sh')], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 240_000 });
    admin = kafka.admin();
    await admin.connect();
  });
  after(async () => {
    try {
      const existing = await admin.listTopics();
      const mine = created.filter((t) => existing.includes(t));
      if (mine.length > 0) await admin.deleteTopics({ topics: mine, timeout: 30_000 });
      await admin.disconnect();
    } finally {
      releaseLock();
    }
  });

  it('a consumer sees key = event key (one partition per key), the payload as JSON and the envelope in headers', async () => {
    const topic = await newTopic();
    const transport = new KafkaTransport({ clientId: 'txbox-kafka-test' });
    await transport.start(signal());
    const sent = [event(topic, 'a'), event(topic, 'b'), event(topic, 'a', { n: 2 }), event(topic, 'c')];
    try {
      for (const e of sent) assert.deepEqual(await transport.publish([e], signal()), [{ ok: true }]);
    } finally {
      await transport.close();
    }
    const got = await readTopic(topic);
    assert.equal(got.length, sent.length);
    for (const e of sent) {
      const m = got.find((g) => g.event.id === e.id);
      assert.ok(m, `event ${e.id} arrived`);
      assert.deepEqual(m.event, e);
      assert.equal(m.message.key?.toString(), e.key);
      assert.equal(m.message.headers?.['txbox-id']?.toString(), e.id);
    }
    const partitionsOfA = new Set(got.filter((g) => g.event.key === 'Item:a').map((g) => g.partition));
    assert.equal(partitionsOfA.size, 1);
    const expected = Partitioners.DefaultPartitioner()({ topic, partitionMetadata: Array.from({ length: 6 }, (_, i) => ({ partitionId: i, leader: 1, partitionErrorCode: 0, replicas: [1], isr: [1] })), message: { key: 'Item:a', value: null } });
    assert.equal([...partitionsOfA][0], expected, 'the Java-compatible murmur2 partition');
  });

  it('kafkajs alone: a producer reused after a refused multi-partition send drops its next batch as a duplicate', async () => {
    // Why the transport replaces its producer after every failed send (kafka-producer-pool.ts).
    const topic = await newTopic(2, [{ name: 'max.message.bytes', value: '20000' }]);
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    try {
      await producer.send({ topic, messages: [{ partition: 0, value: 'a0' }, { partition: 1, value: 'b0' }] });
      await assert.rejects(producer.send({ topic, messages: [{ partition: 0, value: 'x'.repeat(30_000) }, { partition: 1, value: 'b1' }] }), /larger than the max message size/);
      const [ack] = await producer.send({ topic, messages: [{ partition: 1, value: 'b2' }] });
      assert.equal(ack?.errorCode, 0, 'the broker acked b2');
    } finally {
      await producer.disconnect();
    }
    const values = (await readTopic(topic)).map((g) => g.message.value?.toString());
    assert.ok(values.includes('b1'), 'b1 was written although its send failed');
    assert.ok(
      !values.includes('b2'),
      'kafkajs no longer loses b2: it now keeps sequence numbers per partition, and replacing the producer after a failed send may be unnecessary',
    );
  });

  it('a record the broker refuses fails alone; its batch-mates and every later event arrive', async () => {
    const topic = await newTopic(6, [{ name: 'max.message.bytes', value: '20000' }]);
    const transport = new KafkaTransport({ clientId: 'txbox-kafka-test' }); // maxMessageBytes 1 MiB: the broker, not the transport, refuses
    await transport.start(signal());
    const first = Array.from({ length: 24 }, (_, i) => event(topic, `k${i}`, i === 5 ? { blob: 'x'.repeat(30_000) } : { n: i }));
    const later: OutboxEvent[] = [];
    try {
      const outcomes = await transport.publish(first, signal());
      outcomes.forEach((o, i) => assert.equal(o.ok, i !== 5, o.ok ? `event ${i} acked` : o.error.message));
      const refused = outcomes[5]!;
      assert.ok(!refused.ok && refused.error.kind === 'permanent');
      assert.match(refused.error.message, /MESSAGE_TOO_LARGE/);
      for (let round = 0; round < 3; round++) {
        const batch = Array.from({ length: 24 }, (_, i) => event(topic, `k${i}`, { round, n: i }));
        later.push(...batch);
        assert.ok((await transport.publish(batch, signal())).every((o) => o.ok));
      }
    } finally {
      await transport.close();
    }
    const ids = new Set((await readTopic(topic)).map((g) => g.event.id));
    const missing = [...first.filter((_, i) => i !== 5), ...later].filter((e) => !ids.has(e.id));
    assert.equal(missing.length, 0, `${missing.length} acked events are missing from the topic`);
  });

  it('an unknown topic is unroutable at once, and is not created even though the broker would auto-create it', async () => {
    const missing = `txbox-missing-${suffix}-${++counter}`;
    const transport = new KafkaTransport({ clientId: 'txbox-kafka-test' });
    await transport.start(signal());
    const started = Date.now();
    try {
      const [outcome] = await transport.publish([event(missing, 'a')], signal());
      assert.ok(outcome && !outcome.ok && outcome.error.kind === 'permanent');
      assert.match(outcome.error.message, new RegExp(`^unroutable: topic "${missing}" does not exist`));
      assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
    } finally {
      await transport.close();
    }
    assert.ok(!(await admin.listTopics()).includes(missing));
  });

  it('allowAutoTopicCreation lets the broker create the topic (when the broker allows it)', async (t) => {
    const [config] = (
      await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: kafkajs.ConfigResourceTypes.BROKER, name: '1', configNames: ['auto.create.topics.enable'] }] })
    ).resources;
    if (config?.configEntries[0]?.configValue !== 'true') return t.skip('the broker has auto.create.topics.enable=false');
    const topic = `txbox-test-${suffix}-auto-${++counter}`;
    created.push(topic);
    const transport = new KafkaTransport({ clientId: 'txbox-kafka-test', allowAutoTopicCreation: true });
    await transport.start(signal());
    try {
      assert.deepEqual(await transport.publish([event(topic, 'a')], signal()), [{ ok: true }]);
    } finally {
      await transport.close();
    }
    assert.ok((await admin.listTopics()).includes(topic));
  });

  it('an outage gives retriable outcomes within the signal (refused at once, a black hole at the deadline), then recovers', async () => {
    const topic = await newTopic();
    const net = new NetworkSwitch();
    await net.open();
    const client = new Kafka({ brokers: ['127.0.0.1:9092'], clientId: 'txbox-outage', socketFactory: net.factory, requestTimeout: 2000, connectionTimeout: 1000, logLevel: logLevel.NOTHING });
    const transport = new KafkaTransport({ kafka: client, clientRetries: 2 });
    const sent: OutboxEvent[] = [];
    const publish = async (ms: number) => {
      const e = event(topic, `k${sent.length}`);
      sent.push(e);
      const t0 = Date.now();
      const [outcome] = await transport.publish([e], AbortSignal.timeout(ms));
      return { outcome: outcome!, ms: Date.now() - t0 };
    };
    try {
      await transport.start(signal());
      assert.equal((await publish(10_000)).outcome.ok, true);

      net.set('refused');
      const down = await publish(8000);
      // Refused from the start: destination-down (the relay pauses the topic); a request cut off on a live connection: retriable.
      assert.ok(!down.outcome.ok && ['retriable', 'destination-down'].includes(down.outcome.error.kind), down.outcome.ok ? 'acked while down' : down.outcome.error.message);
      assert.ok(down.ms < 8000, `refused connections fail before the signal (${down.ms} ms)`);

      net.set('blackhole');
      const hole = await publish(2000);
      assert.ok(!hole.outcome.ok && hole.outcome.error.kind === 'retriable');
      assert.match(hole.outcome.error.message, /before the caller's signal aborted/);
      assert.ok(hole.ms >= 1900 && hole.ms < 3000, `resolved at the signal (${hole.ms} ms)`);

      net.set('up');
      let recovered = false;
      for (let i = 0; i < 10 && !recovered; i++) recovered = (await publish(10_000)).outcome.ok;
      assert.ok(recovered, 'publishes succeed again once the network is back');
    } finally {
      const t0 = Date.now();
      await transport.close();
      assert.ok(Date.now() - t0 < 20_000, `close() waited ${Date.now() - t0} ms for abandoned sends`);
      await net.close();
    }
  });

  it('kafkajs logs reach the injected logger, never with the credentials', async () => {
    const password = `pw-${randomBytes(8).toString('hex')}`;
    const lines: string[] = [];
    const record = (o: object, m?: string): void => void lines.push(`${m ?? ''} ${JSON.stringify(o)}`);
    const logger: Logger = { debug: record, info: record, warn: record, error: record };
    const transport = new KafkaTransport({ sasl: { mechanism: 'plain', username: 'relay', password }, logger });
    await assert.rejects(transport.start(signal()), /^ConfigError: sasl: /);
    await transport.close();
    assert.ok(lines.some((l) => l.includes('kafkajs')), 'kafkajs log lines arrived');
    assert.ok(lines.every((l) => !l.includes(password)));
  });
});

/** Redirects the client's connections: to the broker, to a closed port, or to a server that never answers. */
class NetworkSwitch {
  #mode: 'up' | 'refused' | 'blackhole' = 'up';
  readonly #sockets = new Set<Socket>();
  readonly #held = new Set<Socket>();
  #hole: Server | null = null;
  #holePort = 0;

  readonly factory: ISocketFactory = ({ host, port, onConnect }) => {
    const target = this.#mode === 'up' ? { host, port } : { host: '127.0.0.1', port: this.#mode === 'refused' ? 1 : this.#holePort };
    const socket = connect(target, onConnect);
    socket.setKeepAlive(true, 30_000);
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
    return socket;
  };

  async open(): Promise<void> {
    this.#hole = createServer((s) => {
      this.#held.add(s);
      s.on('error', () => {});
      s.on('close', () => this.#held.delete(s));
    });
    await new Promise<void>((resolve) => this.#hole!.listen(0, '127.0.0.1', resolve));
    this.#holePort = (this.#hole.address() as AddressInfo).port;
  }

  /** Switches, cutting every open connection (as a broker crash or a network failure would). */
  set(mode: 'up' | 'refused' | 'blackhole'): void {
    this.#mode = mode;
    for (const s of this.#sockets) s.destroy();
  }

  async close(): Promise<void> {
    for (const s of this.#held) s.destroy();
    await new Promise<void>((resolve) => this.#hole!.close(() => resolve()));
  }
}

/** Every record of the topic up to its current end, with the parsed event and partition. */
async function readTopic(topic: string): Promise<{ partition: number; message: KafkaMessage; event: OutboxEvent }[]> {
  const offsets = await admin.fetchTopicOffsets(topic);
  const end = new Map(offsets.filter((o) => Number(o.high) > Number(o.low)).map((o) => [o.partition, Number(o.high)]));
  const out: { partition: number; message: KafkaMessage; event: OutboxEvent }[] = [];
  if (end.size === 0) return out;
  const groupId = `txbox-read-${randomBytes(6).toString('hex')}`;
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    const remaining = new Set(end.keys());
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`reading ${topic} took over 30 s`)), 30_000);
      consumer
        .run({
          autoCommit: false,
          eachMessage: async ({ partition, message }) => {
            const last = end.get(partition);
            if (last === undefined || Number(message.offset) >= last) return;
            const parsed = parseKafkaMessage(message, topic);
            const fallback: OutboxEvent = { id: '', type: '', aggregateType: '', aggregateId: '', key: '', destination: topic, payload: null, headers: {}, occurredAt: new Date(0), version: null };
            out.push({ partition, message, event: parsed.ok ? parsed.event : fallback });
            if (Number(message.offset) + 1 >= last) remaining.delete(partition);
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
    await admin.deleteGroups([groupId]).catch(() => {});
  }
  return out;
}


