import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import type { Transport } from '../../core/ports.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

type RabbitMqModule = typeof import('../../transports/rabbitmq/index.ts');

/** The demo's destinations; each is a routing key on the sink's exchange. */
const DESTINATIONS = ['orders', 'payments'] as const;

/**
 * The demo's downstream side on a real RabbitMQ: a fresh exchange with one
 * queue bound for every destination, consumed in the background into
 * `arrivals` and handed to `deliver` one message at a time, in queue order
 * (so each key's events reach the inventory service in broker order). A
 * message is acked after `deliver` resolved and requeued when it rejects.
 * The queue is exclusive and the exchange auto-deletes, so nothing outlives
 * the demo even if it is killed; close() deletes both at once. amqplib is
 * loaded by `start()`, so the CLI runs without it unless this sink is chosen.
 */
export class RabbitMqDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  readonly #url: string;
  readonly #names = `txbox_demo_${randomBytes(4).toString('hex')}`;
  #module: RabbitMqModule | undefined;
  #model: ChannelModel | null = null;
  #channel: Channel | null = null;
  /** Messages handled one after another: the tail of the chain. */
  #handling: Promise<void> = Promise.resolve();
  /** Messages the consumer could not decode (not txbox events): counted, acked and skipped. */
  undecodable = 0;

  /** `url`: the broker. Default: `amqp://guest:guest@127.0.0.1:5672`. */
  constructor(url = 'amqp://guest:guest@127.0.0.1:5672') {
    this.#url = url;
  }

  get name(): string {
    const where = this.#module?.resolveRabbitMqTransportOptions({ url: this.#url }).display ?? 'RabbitMQ';
    return `RabbitMQ (exchange ${this.#names} at ${where})`;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, { connect }] = await importOptional('the rabbitmq demo', () => Promise.all([import('../../transports/rabbitmq/index.ts'), import('amqplib')]));
    this.#module = mod;
    // Checks the address and credentials with the transport's own messages (naming url, without the password) first.
    const probe = this.transport();
    await probe.start?.(AbortSignal.timeout(15_000));
    await probe.close();
    const model = await connect(this.#url);
    model.on('error', () => {}); // a lost connection shows as missing arrivals in the report
    this.#model = model;
    const ch = await model.createChannel();
    ch.on('error', () => {});
    this.#channel = ch;
    await ch.assertExchange(this.#names, 'direct', { durable: false, autoDelete: true });
    await ch.assertQueue(this.#names, { durable: false, exclusive: true });
    for (const d of DESTINATIONS) await ch.bindQueue(this.#names, this.#names, d);
    await ch.prefetch(200);
    await ch.consume(this.#names, (msg) => {
      if (msg === null) return;
      this.#handling = this.#handling.then(() => this.#handle(ch, msg, deliver, mod));
    });
  }

  transport(): Transport {
    if (!this.#module) throw new Error('RabbitMqDemoSink: call start() first');
    return new this.#module.RabbitMqTransport({
      url: this.#url,
      exchange: this.#names,
      confirmTimeoutMs: 5000,
      reconnectMaxDelayMs: 1000,
      connectionName: 'txbox demo relay',
    });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'rabbitmq', url: this.#url, exchange: this.#names, confirmTimeoutMs: 5000, reconnectMaxDelayMs: 1000, connectionName: 'txbox torture relay' };
  }

  async close(): Promise<void> {
    const ch = this.#channel;
    this.#channel = null;
    if (ch) {
      await ch.deleteQueue(this.#names).catch(() => {});
      await ch.deleteExchange(this.#names).catch(() => {});
    }
    await this.#handling;
    await this.#model?.close().catch(() => {});
    this.#model = null;
  }

  async #handle(ch: Channel, msg: ConsumeMessage, deliver: Deliver, mod: RabbitMqModule): Promise<void> {
    const decoded = mod.decodeRabbitMqMessage(msg);
    let ok = true;
    if (decoded.ok) {
      this.arrivals.push({ id: decoded.event.id, key: decoded.event.key, at: performance.now() });
      ok = await deliver(decoded.event).then(
        () => true,
        () => false,
      );
    } else {
      this.undecodable++;
    }
    if (this.#channel !== ch) return; // closing: the queue is gone with its messages
    try {
      if (ok) ch.ack(msg);
      else ch.nack(msg, false, true); // redelivered, as a broker consumer would see it
    } catch {
      // The channel closed meanwhile; the broker redelivers what was not acked.
    }
  }
}
