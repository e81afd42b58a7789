/**
 * One event as a Kafka message: key = the event's ordering key (so that one
 * key stays in one partition), value = the payload as JSON, the envelope's
 * other fields in `txbox-*` headers, and the event's own headers (trace
 * context) as they are. And the reverse, for consumers.
 */
import { ownHeader, payloadText, type OutboxEvent } from '../../core/envelope.ts';
import type { KafkaRecord } from './kafka-client.ts';
import { eventFromTxboxFields, TXBOX_FIELD } from '../../core/inbound-event.ts';
import { thrownText } from '../../core/error-text.ts';

export const KAFKA_HEADER = { ...TXBOX_FIELD, contentType: 'content-type' } as const;

const DEFAULT_CONTENT_TYPE = 'application/json';
/** A record batch's header (61 bytes) plus the log entry overhead (12), counted once per message. */
const BATCH_OVERHEAD = 73;
/** A record's own framing, at most: length, attributes, timestamp and offset deltas, key and value lengths, header count (varints). */
const RECORD_OVERHEAD = 40;
/** One header's two length varints, at most. */
const HEADER_OVERHEAD = 10;

export type BuiltRecord = { readonly ok: true; readonly record: KafkaRecord } | { readonly ok: false; readonly reason: string };

/**
 * Builds the message, or says why the event cannot travel: a payload JSON
 * cannot represent, a header that is not a string, or an event header named
 * `txbox-*` (set by txbox). An event's `content-type` header replaces the
 * default `application/json`. Reasons never quote a value.
 */
export function buildKafkaRecord(event: OutboxEvent, topic: string): BuiltRecord {
  let json: string | undefined;
  try {
    json = payloadText(event);
  } catch (err) {
    return { ok: false, reason: `the payload cannot be serialized to JSON (${thrownText(err)})` };
  }
  const key = event.key;
  const value = json ?? 'null';
  const headers: Record<string, string> = {};
  let bytes = BATCH_OVERHEAD + RECORD_OVERHEAD + Buffer.byteLength(key, 'utf8') + Buffer.byteLength(value, 'utf8');
  const add = (name: string, text: string): void => {
    ownHeader(headers, name, text);
    bytes += HEADER_OVERHEAD + Buffer.byteLength(name, 'utf8') + Buffer.byteLength(text, 'utf8');
  };
  let contentType = DEFAULT_CONTENT_TYPE;
  const own = event.headers ?? {};
  for (const name in own) {
    const text = own[name];
    if (typeof text !== 'string') return { ok: false, reason: `event header ${JSON.stringify(name)} must be a string` };
    const lower = name.toLowerCase();
    if (lower === KAFKA_HEADER.contentType) {
      contentType = text;
      continue;
    }
    if (lower.startsWith('txbox-')) return { ok: false, reason: `event header ${JSON.stringify(name)} is reserved: txbox-* headers are set by txbox; rename it` };
    if (name === '') return { ok: false, reason: 'an event header has an empty name' };
    add(name, text);
  }
  add(KAFKA_HEADER.id, event.id);
  add(KAFKA_HEADER.type, event.type);
  add(KAFKA_HEADER.aggregateType, event.aggregateType);
  add(KAFKA_HEADER.aggregateId, event.aggregateId);
  if (event.version !== null && event.version !== undefined) add(KAFKA_HEADER.version, String(event.version));
  add(KAFKA_HEADER.occurredAt, event.occurredAt.toISOString());
  // Several destinations may share a topic (one topic per aggregate): this tells them apart.
  add(KAFKA_HEADER.destination, event.destination);
  add(KAFKA_HEADER.contentType, contentType);
  return { ok: true, record: { topic, key, value, headers, bytes } };
}

/** A consumed message, as kafkajs (and most clients) hand it over. */
export interface KafkaMessageLike {
  readonly key: Buffer | string | null;
  readonly value: Buffer | string | null;
  readonly headers?: Readonly<Record<string, Buffer | string | null | readonly (Buffer | string | null)[] | undefined>>;
}

export type ParsedKafkaMessage = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Reads a message written by KafkaTransport back into an event. The event's
 * destination is the `txbox-destination` header, else `destination` (the name
 * the consumer knows the topic by). Only `txbox-id` and
 * `txbox-type` are required. `headers` gets every header except `txbox-*`
 * (and `content-type` when it is the default). Messages name the field, never
 * its value. Consumers dedup by `event.id`: Kafka keeps every copy of a
 * re-published event.
 *
 * @example
 * await consumer.run({ eachMessage: async ({ message }) => {
 *   const parsed = parseKafkaMessage(message, 'orders');
 *   if (parsed.ok) await inbox.process(parsed.event);
 * } });
 */
export function parseKafkaMessage(message: KafkaMessageLike, destination = ''): ParsedKafkaMessage {
  const h = new Map<string, string>();
  const eventHeaders: Record<string, string> = {};
  for (const [name, raw] of Object.entries(message.headers ?? {})) {
    // A null value (Java producers send them; kafkajs decodes them as null) counts as absent.
    const first = Array.isArray(raw) ? raw.find((v) => v != null) : raw;
    if (first == null) continue;
    const text = typeof first === 'string' ? first : (first as Buffer).toString('utf8');
    const lower = name.toLowerCase();
    if (lower.startsWith('txbox-')) h.set(lower, text);
    else if (!(lower === KAFKA_HEADER.contentType && text === DEFAULT_CONTENT_TYPE)) ownHeader(eventHeaders, name, text);
  }
  const value = message.value === null ? null : typeof message.value === 'string' ? message.value : message.value.toString('utf8');
  const recordKey = message.key === null ? null : typeof message.key === 'string' ? message.key : message.key.toString('utf8');
  return eventFromTxboxFields(h, value, { what: 'header', bodyName: 'value', key: (aggregateType, aggregateId) => recordKey ?? `${aggregateType}:${aggregateId}`, destination, headers: eventHeaders });
}
