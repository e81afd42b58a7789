/**
 * One `publish()` call of the RabbitMQ transport: every event is checked and
 * encoded, all are published on one confirm channel without waiting, one
 * timer bounds the wait for their confirms, one abort listener cancels what
 * is still waiting, and the call resolves when every event has an outcome.
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import type { OutgoingMessage, RabbitMqConfirmChannel } from './rabbitmq-confirm-channel.ts';
import { encodeRabbitMqMessage } from './rabbitmq-message.ts';
import { describeTarget, exchangeSetting, fail, tooLarge, type Target } from './rabbitmq-outcomes.ts';
import { routingKeyProblem, type ResolvedRabbitMqTransportOptions } from './rabbitmq-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

export interface PublishContext {
  readonly options: ResolvedRabbitMqTransportOptions;
  /** The body limit in force and where it comes from: maxMessageBytes, or the broker's lower max_message_size once learned. */
  bodyLimit(): { readonly bytes: number; readonly source: string };
  /** A confirm channel on the open connection, opened if needed. */
  channel(): Promise<RabbitMqConfirmChannel>;
}

export class PublishCall {
  readonly #ctx: PublishContext;
  readonly #events: readonly OutboxEvent[];
  readonly #signal: AbortSignal;
  readonly #outcomes: (PublishOutcome | undefined)[];
  readonly #targets: (Target | undefined)[];
  #pending: number;
  #timer: NodeJS.Timeout | undefined;
  #resolve: ((outcomes: PublishOutcome[]) => void) | undefined;
  readonly #onAbort = (): void => this.cancel((t) => fail('retriable', `aborted: the caller's signal cancelled the wait for the confirm of ${describeTarget(t)}`));
  readonly #onTimeout = (): void =>
    this.cancel((t) =>
      // The broker is not answering (nothing about a message delays its confirm): destination-down, so
      // that a silence of any length pauses the destination instead of spending attempts.
      fail('destination-down', `ETIMEDOUT: no publisher confirm from RabbitMQ within ${this.#ctx.options.confirmTimeoutMs} ms (confirmTimeoutMs) for ${describeTarget(t)}: the broker is not answering; it may still arrive`),
    );

  constructor(ctx: PublishContext, events: readonly OutboxEvent[], signal: AbortSignal) {
    this.#ctx = ctx;
    this.#events = events;
    this.#signal = signal;
    this.#outcomes = new Array<PublishOutcome | undefined>(events.length);
    this.#targets = new Array<Target | undefined>(events.length);
    this.#pending = events.length;
  }

  run(): Promise<PublishOutcome[]> {
    return new Promise<PublishOutcome[]>((resolve) => {
      this.#resolve = resolve;
      if (this.#pending === 0) return this.#finish();
      const messages: (OutgoingMessage | null)[] = this.#events.map((_, i) => this.#prepare(i));
      if (this.#pending === 0) return;
      if (this.#signal.aborted) return this.#onAbort();
      this.#timer = setTimeout(this.#onTimeout, this.#ctx.options.confirmTimeoutMs);
      this.#signal.addEventListener('abort', this.#onAbort, { once: true });
      this.#ctx.channel().then(
        (channel) => {
          for (let i = 0; i < messages.length; i++) {
            const m = messages[i];
            if (m && this.#outcomes[i] === undefined) channel.publish(m, (o) => this.#settle(i, o));
          }
        },
        (err: unknown) => {
          const reason = thrownText(err);
          // No channel: the connection is down or refused, for every destination (destination-down: the relay pauses, nothing parks).
          this.cancel((t) => fail('destination-down', `cannot open a confirm channel to publish to ${describeTarget(t)}: ${reason}`, err));
        },
      );
    });
  }

  /** Gives every event still waiting an outcome now (timeout, abort, the broker blocked the connection). Late confirms are ignored. */
  cancel(outcome: (target: Target) => PublishOutcome): void {
    for (let i = 0; i < this.#events.length; i++) {
      if (this.#outcomes[i] === undefined) this.#settle(i, outcome(this.#targets[i]!));
    }
  }

  /** Resolves the event's exchange and routing key, encodes it and checks its size; settles it now when it cannot be sent. */
  #prepare(index: number): OutgoingMessage | null {
    const event = this.#events[index]!;
    const o = this.#ctx.options;
    const d = o.destinations.get(event.destination);
    const setting = exchangeSetting(event.destination, d !== undefined);
    const exchange = d?.exchange ?? o.exchange;
    let routingKey: unknown = d?.routingKey ?? event.destination;
    try {
      if (d?.routingKeyOf) routingKey = d.routingKeyOf(event);
    } catch (err) {
      const target = { destination: event.destination, exchange, routingKey: '?' };
      this.#targets[index] = target;
      this.#settle(index, fail('permanent', `destinations.${event.destination}.routingKey threw: ${thrownText(err)}`, err));
      return null;
    }
    const target = { destination: event.destination, exchange, routingKey: String(routingKey) };
    this.#targets[index] = target;
    const problem = routingKeyProblem(routingKey);
    if (problem) {
      this.#settle(index, fail('permanent', `the routing key for destination ${JSON.stringify(event.destination)} ${problem}; fix destinations.${event.destination}.routingKey`));
      return null;
    }
    let encoded: ReturnType<typeof encodeRabbitMqMessage>;
    try {
      encoded = encodeRabbitMqMessage(event);
    } catch (err) {
      this.#settle(index, fail('permanent', `cannot serialize the event for ${describeTarget(target)}: ${thrownText(err)}`, err));
      return null;
    }
    const limit = this.#ctx.bodyLimit();
    if (encoded.content.length > limit.bytes) {
      this.#settle(index, tooLarge(target, encoded.content.length, limit.bytes, limit.source));
      return null;
    }
    return { ...target, content: encoded.content, properties: encoded.properties, setting };
  }

  #settle(index: number, outcome: PublishOutcome): void {
    if (this.#outcomes[index] !== undefined) return;
    this.#outcomes[index] = outcome;
    if (--this.#pending === 0) this.#finish();
  }

  #finish(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#onAbort);
    this.#resolve!(this.#outcomes as PublishOutcome[]);
  }
}
