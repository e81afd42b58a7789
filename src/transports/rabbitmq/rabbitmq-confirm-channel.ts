/**
 * One confirm channel and the messages in flight on it. Each message gets a
 * confirm callback; a `basic.return` (mandatory, unroutable) arrives before
 * the ack of the same message and turns that ack into a permanent failure.
 * When the broker closes the channel (404 missing exchange, 403 refused,
 * 406 too large), the reason decides each waiting message's outcome.
 */
import type { ChannelModel, ConfirmChannel, Message, Options } from 'amqplib';
import type { PublishOutcome } from '../../core/ports.ts';
import { ACK, channelClosedOutcome, closeReason, fail, maxSizeInText, nacked, unroutable, type CloseReason, type Target } from './rabbitmq-outcomes.ts';
import { thrownText } from '../../core/error-text.ts';

/** A message ready to publish. */
export interface OutgoingMessage extends Target {
  readonly content: Buffer;
  readonly properties: Options.Publish;
  /** The option that chose the exchange, for messages (`exchange` or `destinations.x.exchange`). */
  readonly setting: string;
}

interface InFlight {
  readonly message: OutgoingMessage;
  readonly settle: (outcome: PublishOutcome) => void;
  returned: { readonly code: number; readonly text: string } | null;
}

export interface ChannelHooks {
  /** Why the connection went away, for messages whose channel closed without a reason of its own. */
  lostReason(): string;
  /** The broker closed the channel; `reason` is its close code and text. */
  closedByBroker(reason: CloseReason): void;
  /** The broker refused a body as larger than its `max_message_size`. */
  brokerLimit(bytes: number): void;
}

export class RabbitMqConfirmChannel {
  readonly #channel: ConfirmChannel;
  readonly #hooks: ChannelHooks;
  /** Messages awaiting a possible return, by message id, exchange and routing key: one copy of each at a time. */
  readonly #awaitingReturn = new Map<string, InFlight[]>();
  #closed = false;
  #reason: CloseReason | null = null;
  #inFlight = 0;

  static async open(model: ChannelModel, hooks: ChannelHooks): Promise<RabbitMqConfirmChannel> {
    return new RabbitMqConfirmChannel(await model.createConfirmChannel(), hooks);
  }

  private constructor(channel: ConfirmChannel, hooks: ChannelHooks) {
    this.#channel = channel;
    this.#hooks = hooks;
    channel.on('error', (err: Error) => {
      this.#reason = closeReason(err);
      if (this.#reason === null) return;
      const max = maxSizeInText(this.#reason.text);
      if (max !== null) hooks.brokerLimit(max);
      hooks.closedByBroker(this.#reason);
    });
    channel.on('close', () => {
      this.#closed = true;
    });
    channel.on('return', (m: Message) => this.#onReturn(m));
  }

  /** True once the channel closed (by the broker, the connection, or close()). */
  get closed(): boolean {
    return this.#closed;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Sends one message; `settle` is called exactly once, when the broker confirmed, nacked or the channel closed. */
  publish(message: OutgoingMessage, settle: (outcome: PublishOutcome) => void): void {
    if (this.#closed) {
      settle(fail('retriable', `the channel closed before the message could be sent: ${this.#hooks.lostReason()}`));
      return;
    }
    const id = returnKey(message.properties.messageId, message.exchange, message.routingKey);
    if (this.#awaitingReturn.has(id)) {
      // A return names the message id, exchange and routing key, not the copy, and confirms come out of order:
      // with two copies in flight a return of one could be taken for the other's, and an unroutable copy acked.
      settle(fail('retriable', `an earlier copy of this message to exchange ${JSON.stringify(message.exchange)} is still unconfirmed on the channel (its confirm timed out); it is sent again once that one is settled`));
      return;
    }
    const entry: InFlight = { message, settle, returned: null };
    this.#awaitingReturn.set(id, [entry]);
    this.#inFlight++;
    try {
      this.#channel.publish(message.exchange, message.routingKey, message.content, message.properties, (err: unknown) => this.#confirmed(id, entry, err));
    } catch (err) {
      this.#forget(id, entry);
      if (err instanceof RangeError) {
        settle(fail('permanent', `cannot encode the message: ${err.message} (the event headers are too large for an AMQP table)`, err));
      } else {
        this.#closed = true;
        settle(fail('retriable', `cannot publish on the channel: ${thrownText(err)}`, err));
      }
    }
  }

  /** Closes the channel; messages still unconfirmed are settled as retriable. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#channel.close().catch(() => {});
  }

  #onReturn(m: Message): void {
    const f = m.fields as Message['fields'] & { replyCode?: number; replyText?: string };
    const list = this.#awaitingReturn.get(returnKey(m.properties.messageId, f.exchange, f.routingKey));
    const entry = list?.find((e) => e.returned === null);
    if (entry) entry.returned = { code: f.replyCode ?? 312, text: f.replyText ?? 'NO_ROUTE' };
  }

  #confirmed(id: string, entry: InFlight, err: unknown): void {
    this.#forget(id, entry);
    const m = entry.message;
    if (err === null || err === undefined) {
      entry.settle(entry.returned === null ? ACK : unroutable(m, entry.returned.code, entry.returned.text, m.setting));
      return;
    }
    if (err instanceof Error && err.message === 'message nacked') {
      entry.settle(nacked(m));
      return;
    }
    const target = { ...m, bytes: m.content.length };
    if (this.#reason !== null) {
      entry.settle(channelClosedOutcome(this.#reason, target, ''));
      return;
    }
    // The connection closes its channels before it reports why it closed: read the reason a moment later.
    queueMicrotask(() => entry.settle(channelClosedOutcome(null, target, this.#hooks.lostReason())));
  }

  #forget(id: string, entry: InFlight): void {
    this.#inFlight--;
    const list = this.#awaitingReturn.get(id);
    if (!list) return;
    const i = list.indexOf(entry);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.#awaitingReturn.delete(id);
  }
}

function returnKey(messageId: unknown, exchange: string, routingKey: string): string {
  return `${String(messageId)}\u0000${exchange}\u0000${routingKey}`;
}
