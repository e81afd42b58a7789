import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { NatsConnection } from '@nats-io/transport-node';
import type { ConsumerMessages, JetStreamManager } from '@nats-io/jetstream';
import type { Transport } from '../../core/ports.ts';
import { KeyedDispatcher } from '../../inbox/keyed-dispatcher.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

export interface NatsDemoSinkOptions {
  /** The NATS server (JetStream on). Default: `'127.0.0.1:4222'`. */
  readonly servers?: string;
}

type NatsModule = typeof import('../../transports/nats/index.ts');

/**
 * The demo's downstream side on a real NATS JetStream server: a fresh
 * file-backed stream (2-minute duplicate window) captures both demo
 * destinations, and an ordered consumer reads it back in stream order.
 * Every message goes into `arrivals` and then to `deliver`, one key at a
 * time and many keys at once; when `deliver` rejects, the message is handed
 * to it again after a pause (an ordered consumer has no acks, so the sink
 * retries in place instead of the broker redelivering). The stream is
 * deleted on close. The NATS packages are loaded by `start()`, so the CLI
 * runs without them unless this sink is chosen.
 */
export class NatsDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  readonly #servers: string;
  readonly #run = randomBytes(4).toString('hex');
  readonly #stream = `TXBOX_DEMO_${this.#run}`;
  readonly #prefix = `txbox.demo.${this.#run}`;
  readonly #dispatcher = new KeyedDispatcher(32);
  #module: NatsModule | undefined;
  #nc: NatsConnection | undefined;
  #jsm: JetStreamManager | undefined;
  #messages: ConsumerMessages | undefined;
  #reading: Promise<void> | undefined;
  #stopped = false;

  constructor(options: NatsDemoSinkOptions = {}) {
    this.#servers = options.servers ?? '127.0.0.1:4222';
  }

  get name(): string {
    const where = this.#module?.redactServer(this.#servers) ?? this.#servers.replace(/^([a-z]+:\/\/)?[^@/]*@/i, '$1');
    return `NATS JetStream (stream ${this.#stream} at ${where})`;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, { connect, nanos }, { jetstream, jetstreamManager, StorageType }] = await importOptional('the nats demo', () =>
      Promise.all([import('../../transports/nats/index.ts'), import('@nats-io/transport-node'), import('@nats-io/jetstream')]),
    );
    this.#module = mod;
    // Checks the address and JetStream with the transport's own messages (naming the setting) before anything is created.
    const probe = this.transport();
    await probe.start?.(AbortSignal.timeout(30_000));
    await probe.close();
    const nc = await connect({ servers: this.#servers, name: 'txbox-demo-reader', maxReconnectAttempts: -1, reconnectTimeWait: 250, noAsyncTraces: true });
    this.#nc = nc;
    this.#jsm = await jetstreamManager(nc);
    await this.#jsm.streams.add({ name: this.#stream, subjects: [`${this.#prefix}.>`], storage: StorageType.File, duplicate_window: nanos(120_000) });
    const messages = await (await jetstream(nc).consumers.get(this.#stream)).consume();
    this.#messages = messages;
    this.#reading = (async () => {
      for await (const m of messages) {
        const parsed = mod.parseNatsMessage(m);
        if (!parsed.ok) continue; // not a txbox message: nothing the demo committed
        const event = parsed.event;
        this.arrivals.push({ id: event.id, key: event.key, at: performance.now() });
        void this.#dispatcher.push(event.key, async () => {
          while (!this.#stopped) {
            try {
              return await deliver(event);
            } catch {
              await sleep(200);
            }
          }
        });
      }
    })();
  }

  transport(): Transport {
    if (!this.#module) throw new Error('NatsDemoSink: call start() first');
    return new this.#module.NatsTransport({
      servers: this.#servers,
      subjectPrefix: this.#prefix,
      streams: { orders: this.#stream, payments: this.#stream },
      reconnectTimeWaitMs: 250,
    });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'nats', servers: this.#servers, subjectPrefix: this.#prefix, streams: { orders: this.#stream, payments: this.#stream }, reconnectTimeWaitMs: 250 };
  }

  async close(): Promise<void> {
    this.#stopped = true;
    this.#messages?.stop();
    await this.#reading?.catch(() => {});
    await this.#dispatcher.onIdle();
    await this.#jsm?.streams.delete(this.#stream).catch(() => {});
    await this.#nc?.close();
  }
}
