/**
 * The AMQP form of an event. The body is the JSON payload alone, so that any
 * consumer reads plain JSON; the envelope travels in AMQP properties
 * (`message-id` = event id, `type`, `timestamp`, `content-type`) and headers
 * (`txbox-*` plus the event's own headers such as `traceparent`).
 * `decodeRabbitMqMessage` rebuilds the envelope on the consuming side.
 */
import type { Message, Options } from 'amqplib';
import { ownHeader, payloadText, type EventHeaders, type OutboxEvent } from '../../core/envelope.ts';
import { checkedInbound } from '../../core/inbound-event.ts';
import { InvalidEventError } from '../../core/errors.ts';

/** The AMQP header names txbox sets. Event headers cannot override them. */
export const RABBITMQ_HEADERS = Object.freeze({
  aggregateType: 'txbox-aggregate-type',
  aggregateId: 'txbox-aggregate-id',
  key: 'txbox-key',
  version: 'txbox-version',
  occurredAt: 'txbox-occurred-at',
  destination: 'txbox-destination',
});

const RESERVED_PREFIX = 'txbox-';
/** RabbitMQ's sender-selected distribution headers add routing keys: an event must not set them. */
const ROUTING_HEADERS = new Set(['CC', 'BCC']);

export interface EncodedRabbitMqMessage {
  readonly content: Buffer;
  readonly properties: Options.Publish;
}

/**
 * Encodes an event for `channel.publish`: persistent (`deliveryMode: 2`) and
 * `mandatory`, so an unroutable message comes back instead of vanishing.
 * Throws when the payload cannot be serialized as JSON, and InvalidEventError
 * for an event header this form cannot carry (`txbox-*`, which txbox sets, and
 * RabbitMQ's routing headers `CC`/`BCC`): dropping it silently would deliver
 * a different event; the relay parks it with the reason instead.
 *
 * @example
 * const { content, properties } = encodeRabbitMqMessage(event);
 * channel.publish('orders', 'order.created', content, properties);
 */
export function encodeRabbitMqMessage(event: OutboxEvent): EncodedRabbitMqMessage {
  const json = payloadText(event);
  if (json === undefined) throw new TypeError('the payload is not JSON-serializable');
  const headers: Record<string, unknown> = {};
  const eventHeaders = event.headers;
  if (eventHeaders) {
    for (const name in eventHeaders) {
      const value = eventHeaders[name];
      if (typeof value !== 'string') continue;
      if (name.startsWith(RESERVED_PREFIX)) {
        throw new InvalidEventError(`headers.${name}`, `event header ${JSON.stringify(name)} is reserved: txbox-* headers are set by txbox; rename it`);
      }
      if (ROUTING_HEADERS.has(name)) {
        throw new InvalidEventError(`headers.${name}`, `event header ${JSON.stringify(name)} is a RabbitMQ routing header (sender-selected distribution adds routing keys); rename it`);
      }
      ownHeader(headers, name, value);
    }
  }
  headers[RABBITMQ_HEADERS.aggregateType] = event.aggregateType;
  headers[RABBITMQ_HEADERS.aggregateId] = event.aggregateId;
  headers[RABBITMQ_HEADERS.key] = event.key;
  headers[RABBITMQ_HEADERS.destination] = event.destination;
  headers[RABBITMQ_HEADERS.occurredAt] = event.occurredAt.toISOString();
  if (event.version !== null && event.version !== undefined) headers[RABBITMQ_HEADERS.version] = event.version;
  return {
    content: Buffer.from(json, 'utf8'),
    properties: {
      messageId: event.id,
      type: event.type,
      timestamp: Math.floor(event.occurredAt.getTime() / 1000),
      contentType: 'application/json',
      deliveryMode: 2,
      mandatory: true,
      headers,
    },
  };
}

export type DecodedRabbitMqMessage = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Rebuilds the envelope of a message published by RabbitMqTransport (or by
 * anyone following the same shape: only `message-id` and `type` are
 * required). Messages name the missing or bad field, never its value.
 *
 * @example
 * await channel.consume('orders', (msg) => {
 *   const decoded = decodeRabbitMqMessage(msg!);
 *   if (decoded.ok) await inbox.handle(decoded.event);
 * });
 */
export function decodeRabbitMqMessage(message: Message): DecodedRabbitMqMessage {
  const p = message.properties;
  if (typeof p.messageId !== 'string' || p.messageId === '') return bad('the message has no message-id property');
  if (typeof p.type !== 'string' || p.type === '') return bad('the message has no type property');
  let payload: unknown;
  try {
    payload = message.content.length === 0 ? null : JSON.parse(message.content.toString('utf8'));
  } catch {
    return bad('the body is not valid JSON');
  }
  const raw = (p.headers ?? {}) as Record<string, unknown>;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) {
    if (!name.startsWith(RESERVED_PREFIX) && typeof value === 'string') ownHeader(headers, name, value);
  }
  const text = (name: string): string | undefined => (typeof raw[name] === 'string' ? (raw[name] as string) : undefined);
  const aggregateType = text(RABBITMQ_HEADERS.aggregateType) ?? '';
  const aggregateId = text(RABBITMQ_HEADERS.aggregateId) ?? '';
  const version = raw[RABBITMQ_HEADERS.version];
  if (version !== undefined && !Number.isSafeInteger(version)) return bad(`the ${RABBITMQ_HEADERS.version} header must be an integer`);
  const iso = text(RABBITMQ_HEADERS.occurredAt);
  const occurredAt = iso !== undefined ? new Date(iso) : typeof p.timestamp === 'number' ? new Date(p.timestamp * 1000) : new Date();
  if (Number.isNaN(occurredAt.getTime())) return bad(`the ${RABBITMQ_HEADERS.occurredAt} header must be an ISO 8601 date`);
  return checkedInbound({
    id: p.messageId,
    type: p.type,
    aggregateType,
    aggregateId,
    key: text(RABBITMQ_HEADERS.key) ?? `${aggregateType}:${aggregateId}`,
    destination: text(RABBITMQ_HEADERS.destination) ?? message.fields.routingKey,
    payload,
    headers: headers as EventHeaders,
    occurredAt,
    version: (version as number | undefined) ?? null,
  });
}

function bad(message: string): DecodedRabbitMqMessage {
  return { ok: false, message };
}
