import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import type { Transport } from '../../core/ports.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

type RabbitMqModule = typeof import('../../transports/rabbitmq/index.ts');
type ConnectionModule = typeof import('../../transports/rabbitmq/rabbitmq-connection.ts');
type Connection = InstanceType<ConnectionModule['RabbitMqConnection']>;

/** The demo's destinations; each is a routing key on the sink's exchange. */
const DESTINATIONS = ['orders', 'payments'] as const;

export interface RabbitMqDemoSinkOptions {
  /** The broker. Default: `amqp://guest:guest@127.0.0.1:5672`. */
  readonly url?: string;
  /** The exchange and queue name. Default: `txbox_demo_<random>`. */
  readonly name?: string;
  /**
   * A durable exchange and queue, which outlive a dropped connection and a
   * broker restart (`txbox torture`), instead of an auto-deleted exchange and
   * an exclusive queue, which vanish with the reader (the demo: nothing is
   * left behind when it is killed). Both are deleted by close(). Default: false.
   */
  readonly durable?: boolean;
}

/**
 * The demo's downstream side on a real RabbitMQ: a fresh exchange with one
 * queue bound for every destination, declared by `start()` (before any relay
 * publishes), consumed in the background into `arrivals` and handed to
 * `deliver` one message at a time, in queue order (so each key's events reach
 * the inventory service in broker order). A message is acked after `deliver`
 * resolved and requeued when it rejects. The connection reopens by itself
 * with backoff (the transport's own reconnecting connection) and the reader
 * declares, binds and consumes again on every new connection or channel;
 * what was not acked is redelivered (a duplicate, never a gap, with
 * `durable`). amqplib is loaded by `start()`, so the CLI runs without it
 * unless this sink is chosen.
 */
export class RabbitMqDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  readonly #url: string;
  readonly #names: string;
  readonly #durable: boolean;
  #module: RabbitMqModule | undefined;
  #connection: Connection | null = null;
  #channel: Channel | null = null;
  #closing = false;
  /** Messages handled one after another: the tail of the chain. */
  #handling: Promise<void> = Promise.resolve();
  /** Messages the consumer could not decode (not txbox events): counted, acked and skipped. */
  undecodable = 0;
  /** Times the reader lost its connection or channel and consumed again. */
  resubscribed = 0;

  /** `url` or options; the url defaults to `amqp://guest:guest@127.0.0.1:5672`. */
  constructor(options: string | RabbitMqDemoSinkOptions = {}) {
    const o = typeof options === 'string' ? { url: options } : options;
    this.#url = o.url ?? 'amqp://guest:guest@127.0.0.1:5672';
    this.#names = o.name ?? `txbox_demo_${randomBytes(4).toString('hex')}`;
    this.#durable = o.durable ?? false;
  }

  get name(): string {
    const where = this.#module?.resolveRabbitMqTransportOptions({ url: this.#url }).display ?? 'RabbitMQ';
    return `RabbitMQ (exchange ${this.#names} at ${where})`;
  }

  /** The reader's AMQP connection name (`connection_name` client property), which tells it apart in `rabbitmqctl list_connections`. */
  get connectionName(): string {
    return `txbox demo reader ${this.#names}`;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, { RabbitMqConnection }] = await importOptional('the rabbitmq demo', () =>
      Promise.all([import('../../transports/rabbitmq/index.ts'), import('../../transports/rabbitmq/rabbitmq-connection.ts')]),
    );
    this.#module = mod;
    // Checks the address and credentials with the transport's own messages (naming url, without the password) first.
    const probe = this.transport();
    await probe.start?.(AbortSignal.timeout(15_000));
    await probe.close();
    const options = mod.resolveRabbitMqTransportOptions({ url: this.#url, reconnectInitialDelayMs: 100, reconnectMaxDelayMs: 2000, connectionName: this.connectionName });
    let first: Promise<void> = Promise.resolve();
    const connection = new RabbitMqConnection(options, {
      connected: (model, reconnected) => {
        const subscribed = this.#subscribe(model, deliver, mod, reconnected);
        if (!reconnected) first = subscribed;
      },
      disconnected: () => {
        this.#channel = null;
      },
      reconnecting: () => {},
      blocked: () => {},
      unblocked: () => {},
    });
    this.#connection = connection;
    await connection.open(AbortSignal.timeout(15_000));
    // The exchange, queue and bindings exist before start() returns, so nothing published afterwards is unroutable.
    await first;
    if (!this.#channel) throw new Error(`the RabbitMQ reader could not declare and consume ${this.#names}`);
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
    this.#closing = true;
    let ch = this.#channel;
    this.#channel = null;
    // Between a channel error and its replacement: a channel of its own, so that a durable queue is not left behind.
    if (!ch) ch = (await this.#connection?.model?.createChannel().catch(() => null)) ?? null;
    if (ch) {
      ch.on('error', () => {});
      await ch.deleteQueue(this.#names).catch(() => {});
      await ch.deleteExchange(this.#names).catch(() => {});
    }
    await this.#handling;
    await this.#connection?.close();
    this.#connection = null;
  }

  /**
   * Declares the exchange and queue, binds every destination and consumes, on
   * a new channel of `model`; retried with backoff while `model` is the open
   * connection (the first subscription gives up after 5 attempts, so that
   * start() fails instead of waiting forever). `again`: after a lost
   * connection or channel.
   */
  async #subscribe(model: ChannelModel, deliver: Deliver, mod: RabbitMqModule, again: boolean): Promise<void> {
    for (let attempt = 0; !this.#closing && this.#connection?.model === model; attempt++) {
      let ch: Channel | undefined;
      try {
        ch = await model.createChannel();
        const channel = ch;
        channel.on('error', () => {});
        channel.on('close', () => {
          // A channel error on a live connection: consume again on a new channel.
          if (this.#channel !== channel) return;
          this.#channel = null;
          if (!this.#closing) void this.#subscribe(model, deliver, mod, true);
        });
        if (this.#durable) {
          await channel.assertExchange(this.#names, 'direct', { durable: true, autoDelete: false });
          await channel.assertQueue(this.#names, { durable: true, exclusive: false, autoDelete: false });
        } else {
          await channel.assertExchange(this.#names, 'direct', { durable: false, autoDelete: true });
          await channel.assertQueue(this.#names, { durable: false, exclusive: true });
        }
        for (const d of DESTINATIONS) await channel.bindQueue(this.#names, this.#names, d);
        await channel.prefetch(200);
        if (again) this.resubscribed++;
        this.#channel = channel;
        await channel.consume(this.#names, (msg) => {
          if (msg === null) return;
          this.#handling = this.#handling.then(() => this.#handle(channel, msg, deliver, mod));
        });
        return;
      } catch (err) {
        if (ch && this.#channel === ch) this.#channel = null;
        await ch?.close().catch(() => {});
        if (!again && attempt >= 4) throw err;
        await sleep(Math.min(2000, 100 * 2 ** attempt));
      }
    }
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
    // Closing, or this channel is gone: the broker redelivers what it did not see acked.
    if (this.#channel !== ch) return;
    try {
      if (ok) ch.ack(msg);
      else ch.nack(msg, false, true); // redelivered, as a broker consumer would see it
    } catch {
      // The channel closed meanwhile; the broker redelivers what was not acked.
    }
  }
}
