import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Admin, Consumer, Kafka } from 'kafkajs';
import type { Transport } from '../../core/ports.ts';
import { within } from '../../core/abort.ts';
import type { SocketTracker } from '../../transports/kafka/kafka-client.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

export interface KafkaDemoSinkOptions {
  /** The bootstrap broker, `host:port`. Default: `'127.0.0.1:9092'` (scripts/kafka/up.sh). */
  readonly brokers?: string;
}

type KafkaModule = typeof import('../../transports/kafka/index.ts');

/**
 * The demo's destinations share one topic: their events have the same keys
 * (an order's creation and its payments), and Kafka keeps order only within
 * a partition of one topic. The `txbox-destination` header tells them apart.
 */
const DESTINATIONS = ['orders', 'payments'] as const;
const PARTITIONS = 6;
/** How long close() may take in all (the reader's disconnect, the topic's and group's deletion, the admin's disconnect). */
const CLOSE_MS = 10_000;

/**
 * The demo's downstream side on a real Kafka broker: one fresh topic (6
 * partitions) for both destinations, published to by KafkaTransport and read back
 * in the background by a consumer group. Every message goes into `arrivals`
 * and then to `deliver`; offsets are committed after each fetched batch, up
 * to the last message whose `deliver` resolved, so a crash of the reader
 * re-reads what was not delivered (the inbox drops repeats). When `deliver` rejects, the message is handed to it again after a
 * pause, holding back its partition, so each key keeps its order. Partitions
 * are read in parallel. The topic and the group are deleted on close. kafkajs
 * is loaded by `start()`, so the CLI runs without it unless this sink is chosen.
 * close() is bounded and destroys the sockets kafkajs leaves open after a
 * broker restart (kafkajs issues #1147, #1639), as the transport and the
 * consumer do: the process it runs in ends.
 */
export class KafkaDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  /** Messages that are not txbox events: counted rather than hidden. */
  undecodable = 0;
  readonly #brokers: string;
  readonly #run = randomBytes(4).toString('hex');
  readonly #topic = `txbox-demo-${this.#run}`;
  readonly #group = `txbox-demo-${this.#run}`;
  #module: KafkaModule | undefined;
  #admin: Admin | undefined;
  #consumer: Consumer | undefined;
  #created = false;
  #stopped = false;
  #sockets: SocketTracker | undefined;

  constructor(options: KafkaDemoSinkOptions = {}) {
    this.#brokers = options.brokers ?? '127.0.0.1:9092';
  }

  get name(): string {
    return `Kafka (topic ${this.#topic} at ${this.#brokers})`;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, kafkajs, { trackSockets }] = await importOptional('the kafka demo', () =>
      Promise.all([import('../../transports/kafka/index.ts'), import('kafkajs'), import('../../transports/kafka/kafka-client.ts')]),
    );
    const sockets = (this.#sockets = trackSockets());
    this.#module = mod;
    // Checks the address with the transport's own messages (naming the setting) before anything is created.
    const probe = new mod.KafkaTransport({ brokers: [this.#brokers], allowAutoTopicCreation: true, producers: 1 });
    try {
      await probe.start(AbortSignal.timeout(30_000));
    } finally {
      await probe.close();
    }
    const kafka: Kafka = new kafkajs.Kafka({ brokers: [this.#brokers], clientId: 'txbox-demo-reader', logLevel: kafkajs.logLevel.NOTHING, socketFactory: sockets.socketFactory });
    this.#admin = kafka.admin();
    await this.#admin.connect();
    await this.#admin.createTopics({ topics: [{ topic: this.#topic, numPartitions: PARTITIONS }], waitForLeaders: true });
    this.#created = true;
    // kafkajs restarts a crashed consumer on a timer: not once close() began (a restart loop would keep the process alive).
    const consumer = kafka.consumer({ groupId: this.#group, maxWaitTimeInMs: 100, retry: { restartOnFailure: async () => !this.#stopped } });
    this.#consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topic: this.#topic, fromBeginning: true });
    const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: PARTITIONS,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        let done: string | null = null;
        for (const message of batch.messages) {
          if (!isRunning() || isStale()) break;
          const parsed = mod.parseKafkaMessage(message);
          if (parsed.ok) {
            this.arrivals.push({ id: parsed.event.id, key: parsed.event.key, at: performance.now() });
            await this.#deliverUntilDone(deliver, parsed.event);
          } else {
            this.undecodable++;
          }
          resolveOffset(message.offset);
          done = message.offset;
          await heartbeat();
        }
        // Only now, and only up to the last delivered message: the rest is read again by the group's next reader.
        if (done !== null) await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: (BigInt(done) + 1n).toString() }]);
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('the demo reader did not join its consumer group within 30 s')), 30_000);
    });
    try {
      await Promise.race([joined, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  transport(): Transport {
    if (!this.#module) throw new Error('KafkaDemoSink: call start() first');
    const topics = Object.fromEntries(DESTINATIONS.map((d) => [d, this.#topic]));
    return new this.#module.KafkaTransport({ brokers: [this.#brokers], clientId: 'txbox-demo-relay', topics });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'kafka', brokers: [this.#brokers], clientId: 'txbox-torture-relay', topics: Object.fromEntries(DESTINATIONS.map((d) => [d, this.#topic])) };
  }

  async close(): Promise<void> {
    this.#stopped = true;
    const deadline = Date.now() + CLOSE_MS;
    const step = (p: Promise<unknown> | undefined): Promise<boolean> => within(p?.catch(() => {}) ?? Promise.resolve(), Math.max(0, deadline - Date.now()));
    await step(this.#consumer?.disconnect());
    if (this.#admin) {
      if (this.#created) await step(this.#admin.deleteTopics({ topics: [this.#topic], timeout: Math.max(1, deadline - Date.now()) }));
      await step(this.#admin.deleteGroups([this.#group]));
      await step(this.#admin.disconnect());
    }
    // What a step left behind (a reconnect to a broker that was killed, a request without an answer) fails at once.
    this.#sockets?.destroyAll();
  }

  async #deliverUntilDone(deliver: Deliver, event: Parameters<Deliver>[0]): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await deliver(event);
      } catch (err) {
        // Stopping: leave the offset uncommitted (the message counts as not delivered).
        if (this.#stopped) throw err;
        await sleep(Math.min(2000, 100 * 2 ** attempt));
      }
    }
  }
}
