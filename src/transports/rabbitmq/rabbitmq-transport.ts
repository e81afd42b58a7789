import type { ChannelModel } from 'amqplib';
import { TypedEmitter } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { brokerOutage, startDespiteOutage } from '../../core/broker-outage.ts';
import { ConfigError, type TransportErrorKind } from '../../core/errors.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { RabbitMqConfirmChannel, type ChannelHooks } from './rabbitmq-confirm-channel.ts';
import { RabbitMqConnection, type ConnectionHooks } from './rabbitmq-connection.ts';
import { closeReason, fail, quote, REPLY, scrub, type Target } from './rabbitmq-outcomes.ts';
import { PublishCall, type PublishContext } from './rabbitmq-publish-call.ts';
import { resolveRabbitMqTransportOptions, type RabbitMqTransportOptions, type ResolvedRabbitMqTransportOptions } from './rabbitmq-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

/** Lifecycle events of a RabbitMqTransport. `url` is always the redacted URL. */
export interface RabbitMqTransportEvents {
  connected: { readonly url: string; readonly reconnected: boolean };
  disconnected: { readonly url: string; readonly reason: string };
  reconnecting: { readonly url: string; readonly attempt: number; readonly delayMs: number; readonly reason: string };
  /** The broker stopped reading from the connection: a memory or disk alarm. Publishes fail fast (destination-down) until `unblocked`. */
  blocked: { readonly url: string; readonly reason: string };
  unblocked: { readonly url: string };
  /** The broker closed a confirm channel (404 missing exchange, 403 refused, 406 too large, ...); the next publish opens a new one. */
  'channel-closed': { readonly url: string; readonly code: number; readonly reason: string };
}

interface ChannelSlot {
  channel: RabbitMqConfirmChannel | null;
  opening: Promise<RabbitMqConfirmChannel> | null;
}

/**
 * Publishes each event as one persistent AMQP message on a confirm channel,
 * with `mandatory` set: the broker's publisher confirm is the ack, a return
 * (unroutable) or a missing, refused or oversize target is permanent, and a
 * nack, a lost connection, a resource alarm or a confirm timeout is
 * retriable. Events of one call are all published before waiting for their
 * confirms. The connection comes back by itself after a broker restart.
 *
 * @example
 * const transport = new RabbitMqTransport({
 *   url: process.env.AMQP_URL!, // 'amqp://relay:secret@rabbit.internal:5672/'
 *   exchange: 'events',         // routing key = destination by default
 *   destinations: { payments: { exchange: 'payments', routingKey: (e) => e.type } },
 * });
 * const relay = createRelay({ store, transport });
 */
export class RabbitMqTransport extends TypedEmitter<RabbitMqTransportEvents> implements Transport {
  readonly name = 'rabbitmq';
  readonly #o: ResolvedRabbitMqTransportOptions;
  readonly #ctx: PublishContext;
  readonly #calls = new Set<PublishCall>();
  readonly #inFlight = new Set<Promise<unknown>>();
  #connection: RabbitMqConnection;
  #slots: ChannelSlot[] = [];
  #next = 0;
  #starting: Promise<void> | null = null;
  #closing: Promise<void> | null = null;
  /** The broker's max_message_size once a rejection told us, if lower than maxMessageBytes. */
  #brokerLimit: number | null = null;

  /** Throws ConfigError naming the field when an option is invalid. Does not connect: `start()` does. */
  constructor(options: RabbitMqTransportOptions) {
    super();
    this.#o = resolveRabbitMqTransportOptions(options);
    this.#connection = this.#newConnection();
    this.#ctx = {
      options: this.#o,
      bodyLimit: () =>
        this.#brokerLimit !== null && this.#brokerLimit < this.#o.maxMessageBytes
          ? { bytes: this.#brokerLimit, source: "the broker's max_message_size; lower maxMessageBytes to match" }
          : { bytes: this.#o.maxMessageBytes, source: 'maxMessageBytes' },
      channel: () => this.#channel(),
    };
  }

  /**
   * Connects (one attempt, bounded by connectTimeoutMs), declares exchanges
   * when `assertExchanges` is set, and opens a confirm channel. Throws
   * ConfigError naming `url` for a refused login or an unknown vhost; the
   * password never appears. When nothing answers at `url` (refused, unknown
   * host, timeout) it logs a warning and resolves: the events wait as
   * destination-down and the next publish connects. Reopens after `close()`.
   */
  async start(signal: AbortSignal = new AbortController().signal): Promise<void> {
    const closing = this.#closing;
    if (closing) {
      await closing;
      if (this.#closing === closing) {
        this.#closing = null;
        this.#connection = this.#newConnection();
      }
    }
    const o = this.#o;
    await startDespiteOutage({ transport: 'rabbitmq', address: o.display, logger: o.logger }, () => this.#connectOnce(signal), signal);
  }

  /** Connects if not connected yet (concurrent calls share one attempt); rejects with the ConfigError of a failed attempt. */
  #connectOnce(signal: AbortSignal): Promise<void> {
    if (this.#connection.state !== 'idle') return this.#starting ?? Promise.resolve();
    this.#starting ??= this.#start(signal).finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  /**
   * Publishes every event at once and resolves with one outcome per event in
   * input order, after the broker confirmed each. Never rejects for a failed
   * event. While the connection is down or blocked, resolves at once with
   * destination-down outcomes. Aborting `signal` makes the events still waiting
   * retriable (they may still arrive).
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing) return Promise.resolve(this.#failAll(events, 'the RabbitMQ transport is closed; call start() to reopen it'));
    if (events.length === 0) return Promise.resolve([]);
    if (this.#connection.state === 'idle' || this.#starting) {
      return this.#track(
        this.#connectOnce(signal).then(
          () => this.publish(events, signal),
          // Nothing answers (a relay started during an outage): destination-down, so the events wait instead of using up attempts.
          (err: unknown) => this.#failAll(events, `cannot connect: ${thrownText(err)}`, brokerOutage(err) === null ? 'retriable' : 'destination-down'),
        ),
      );
    }
    if (this.#connection.model === null) {
      // Reconnecting: the broker is down or unreachable, so destination-down (the relay pauses the destination,
      // nothing uses up attempts or parks); after close(), retriable.
      const kind = this.#connection.state === 'reconnecting' ? 'destination-down' : 'retriable';
      return Promise.resolve(this.#failAll(events, `not connected to RabbitMQ at ${this.#o.display}: ${this.#connection.describe()}`, kind));
    }
    const blocked = this.#connection.blocked;
    // A resource alarm blocks every publisher of the broker: destination-down (paused, no attempts spent).
    if (blocked !== null) return Promise.resolve(this.#failAll(events, this.#blockedMessage(blocked), 'destination-down'));
    const call = new PublishCall(this.#ctx, events, signal);
    this.#calls.add(call);
    return this.#track(call.run().finally(() => this.#calls.delete(call)));
  }

  /** Waits for outstanding confirms (each call is bounded by confirmTimeoutMs), then closes the channels and the connection and stops reconnecting. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    await this.#starting?.catch(() => {});
    await Promise.allSettled([...this.#inFlight]);
    await Promise.allSettled(this.#slots.map((s) => s.channel?.close()));
    await this.#connection.close();
  }

  async #start(signal: AbortSignal): Promise<void> {
    await this.#connection.open(signal);
    try {
      if (this.#o.assertExchanges) await this.#assertExchanges(this.#connection.model!);
      await this.#channel();
    } catch (err) {
      await this.#connection.close();
      this.#connection = this.#newConnection();
      throw err;
    }
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    void promise.finally(() => this.#inFlight.delete(promise)).catch(() => {});
    return promise;
  }

  /** A confirm channel, round robin over `channels` slots; a slot whose channel closed opens a new one. */
  #channel(): Promise<RabbitMqConfirmChannel> {
    const slot = this.#slots[this.#next++ % this.#slots.length]!;
    if (slot.channel !== null && !slot.channel.closed) return Promise.resolve(slot.channel);
    slot.opening ??= this.#openChannel(slot).finally(() => {
      slot.opening = null;
    });
    return slot.opening;
  }

  async #openChannel(slot: ChannelSlot): Promise<RabbitMqConfirmChannel> {
    const model = this.#connection.model;
    if (model === null) throw new Error(`not connected: ${this.#connection.describe()}`);
    const hooks: ChannelHooks = {
      lostReason: () => `connection lost (${this.#connection.lastError || 'closed'})`,
      closedByBroker: (reason) => {
        this.#o.logger.warn({ url: this.#o.display, code: reason.code, reason: reason.text }, 'RabbitMQ closed a confirm channel; the next publish opens a new one');
        this.emit('channel-closed', { url: this.#o.display, code: reason.code, reason: reason.text });
      },
      brokerLimit: (bytes) => {
        this.#brokerLimit = bytes;
      },
    };
    slot.channel = await RabbitMqConfirmChannel.open(model, hooks);
    return slot.channel;
  }

  async #assertExchanges(model: ChannelModel): Promise<void> {
    const o = this.#o;
    const settingOf = new Map<string, string>();
    for (const [destination, d] of o.destinations) if (!settingOf.has(d.exchange)) settingOf.set(d.exchange, `destinations.${destination}.exchange`);
    if (!settingOf.has(o.exchange)) settingOf.set(o.exchange, 'exchange');
    const channel = await model.createChannel();
    channel.on('error', () => {}); // the failed assertExchange below reports it
    try {
      for (const [name, setting] of settingOf) {
        if (name === '' || name.startsWith('amq.')) continue;
        try {
          await channel.assertExchange(name, o.exchangeType, { durable: true });
        } catch (err) {
          const reason = closeReason(err);
          const said = reason ? `${reason.code} ${reason.text}` : scrub(String(err));
          if (reason?.code === REPLY.PRECONDITION_FAILED) {
            throw new ConfigError('exchangeType', `exchange ${quote(name)} (${setting}) exists with other settings (${said}); set exchangeType to its type, or name another exchange`, { cause: err });
          }
          if (reason?.code === REPLY.ACCESS_REFUSED) {
            throw new ConfigError(setting, `the user in url may not declare exchange ${quote(name)} (${said}); grant configure permission, or declare it elsewhere and turn assertExchanges off`, { cause: err });
          }
          throw new ConfigError(setting, `cannot declare exchange ${quote(name)} (${said})`, { cause: err });
        }
      }
    } finally {
      await channel.close().catch(() => {});
    }
  }

  #newConnection(): RabbitMqConnection {
    const url = this.#o.display;
    const log = this.#o.logger;
    this.#slots = Array.from({ length: this.#o.channels }, () => ({ channel: null, opening: null }));
    const hooks: ConnectionHooks = {
      connected: (_model, reconnected) => {
        log.info({ url, reconnected }, reconnected ? 'reconnected to RabbitMQ' : 'connected to RabbitMQ');
        this.emit('connected', { url, reconnected });
      },
      disconnected: (reason) => {
        log.warn({ url, reason }, 'lost the connection to RabbitMQ; publishes fail as retriable until it is back');
        this.emit('disconnected', { url, reason });
      },
      reconnecting: (attempt, delayMs, reason) => {
        log.info({ url, attempt, delayMs, reason }, 'reconnecting to RabbitMQ');
        this.emit('reconnecting', { url, attempt, delayMs, reason });
      },
      blocked: (reason) => {
        log.warn({ url, reason }, 'RabbitMQ blocked the connection (resource alarm); publishes fail as destination-down until it lifts');
        this.emit('blocked', { url, reason });
        for (const call of this.#calls) call.cancel((t) => this.#blockedOutcome(reason, t));
      },
      unblocked: () => {
        log.info({ url }, 'RabbitMQ unblocked the connection');
        this.emit('unblocked', { url });
      },
    };
    return new RabbitMqConnection(this.#o, hooks);
  }

  #blockedMessage(reason: string): string {
    return `RabbitMQ at ${this.#o.display} blocks publishing (connection.blocked: ${reason}); a memory or disk alarm is raised on the broker, free resources there`;
  }

  #blockedOutcome(reason: string, t: Target): PublishOutcome {
    return fail('destination-down', `${this.#blockedMessage(reason)}; the message for exchange ${quote(t.exchange)} was sent and may still arrive once the alarm clears`);
  }

  #failAll(events: readonly OutboxEvent[], message: string, kind: TransportErrorKind = 'retriable'): PublishOutcome[] {
    const outcome = fail(kind, message);
    return events.map(() => outcome);
  }
}
