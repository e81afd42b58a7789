/**
 * One event as a Pub/Sub message: data = the payload as JSON, ordering key =
 * the event's key (one key's messages are delivered in publish order on a
 * subscription with message ordering), the envelope's other fields in
 * `txbox-*` attributes, and the event's own headers (trace context) as
 * attributes as they are. And the reverse, for consumers.
 */
import { ownHeader, payloadText, type OutboxEvent } from '../../core/envelope.ts';
import { eventFromTxboxFields, TXBOX_FIELD } from '../../core/inbound-event.ts';
import { thrownText } from '../../core/error-text.ts';

export const PUBSUB_ATTRIBUTE = { ...TXBOX_FIELD, key: 'txbox-key', contentType: 'content-type' } as const;

/** Pub/Sub's limits: a message's data plus attributes (10 MB), attributes per message, attribute key and value bytes. */
export const PUBSUB_LIMITS = { messageBytes: 10_000_000, attributes: 100, keyBytes: 256, valueBytes: 1024, orderingKeyBytes: 1024 } as const;

const DEFAULT_CONTENT_TYPE = 'application/json';

/** What `Topic.publishMessage` takes, plus its size as Pub/Sub counts it. */
export interface EncodedPubSubMessage {
  readonly data: Buffer;
  readonly attributes: Record<string, string>;
  readonly orderingKey: string;
  readonly bytes: number;
}

export type BuiltPubSubMessage = { readonly ok: true; readonly message: EncodedPubSubMessage } | { readonly ok: false; readonly reason: string };

/**
 * Builds the message, or says why the event cannot travel (permanent): a
 * payload JSON cannot represent, a header that is not a string or breaks an
 * attribute limit, an event header named `txbox-*` or `goog*`, a message over
 * 10 MB. An event's `content-type` header replaces `application/json`.
 * Reasons never quote a value.
 */
export function buildPubSubMessage(event: OutboxEvent): BuiltPubSubMessage {
  let json: string | undefined;
  try {
    json = payloadText(event);
  } catch (err) {
    return { ok: false, reason: `the payload cannot be serialized to JSON (${thrownText(err)})` };
  }
  // The key is an ordering key and an attribute value: both allow 1024 bytes.
  if (Buffer.byteLength(event.key, 'utf8') > PUBSUB_LIMITS.orderingKeyBytes) return { ok: false, reason: `the event key is over ${PUBSUB_LIMITS.orderingKeyBytes} bytes, the most a Pub/Sub ordering key may have` };
  const data = Buffer.from(json ?? 'null', 'utf8');
  const attributes: Record<string, string> = {};
  let bytes = data.length;
  let problem: string | null = null;
  const add = (name: string, text: string): void => {
    const k = Buffer.byteLength(name, 'utf8');
    const v = Buffer.byteLength(text, 'utf8');
    if (k > PUBSUB_LIMITS.keyBytes) problem ??= `attribute ${JSON.stringify(name.slice(0, 40))} has a name over ${PUBSUB_LIMITS.keyBytes} bytes`;
    if (v > PUBSUB_LIMITS.valueBytes) problem ??= `attribute ${JSON.stringify(name)} has a value of ${v} bytes; Pub/Sub allows ${PUBSUB_LIMITS.valueBytes}`;
    ownHeader(attributes, name, text);
    bytes += k + v;
  };
  let contentType = DEFAULT_CONTENT_TYPE;
  const own = event.headers ?? {};
  for (const name in own) {
    const text = own[name];
    if (typeof text !== 'string') return { ok: false, reason: `event header ${JSON.stringify(name)} must be a string` };
    const lower = name.toLowerCase();
    if (lower === PUBSUB_ATTRIBUTE.contentType) {
      contentType = text;
      continue;
    }
    if (lower.startsWith('txbox-')) return { ok: false, reason: `event header ${JSON.stringify(name)} is reserved: txbox-* attributes are set by txbox; rename it` };
    if (lower.startsWith('goog')) return { ok: false, reason: `event header ${JSON.stringify(name)} cannot be a Pub/Sub attribute: names starting with "goog" are reserved by Google; rename it` };
    if (name === '') return { ok: false, reason: 'an event header has an empty name' };
    add(name, text);
  }
  add(PUBSUB_ATTRIBUTE.id, event.id);
  add(PUBSUB_ATTRIBUTE.type, event.type);
  add(PUBSUB_ATTRIBUTE.aggregateType, event.aggregateType);
  add(PUBSUB_ATTRIBUTE.aggregateId, event.aggregateId);
  // Also in the attributes: a publisher without message ordering sends no ordering key.
  add(PUBSUB_ATTRIBUTE.key, event.key);
  if (event.version !== null && event.version !== undefined) add(PUBSUB_ATTRIBUTE.version, String(event.version));
  add(PUBSUB_ATTRIBUTE.occurredAt, event.occurredAt.toISOString());
  // Several destinations may share a topic: this tells them apart.
  add(PUBSUB_ATTRIBUTE.destination, event.destination);
  add(PUBSUB_ATTRIBUTE.contentType, contentType);
  if (problem !== null) return { ok: false, reason: problem };
  if (Object.keys(attributes).length > PUBSUB_LIMITS.attributes) return { ok: false, reason: `the event has ${Object.keys(attributes).length - 9} headers; Pub/Sub allows ${PUBSUB_LIMITS.attributes} attributes per message, txbox uses 9 of them` };
  const orderingKey = event.key;
  bytes += Buffer.byteLength(orderingKey, 'utf8');
  if (bytes > PUBSUB_LIMITS.messageBytes) return { ok: false, reason: `the message is too large: ${bytes} bytes; Pub/Sub accepts at most ${PUBSUB_LIMITS.messageBytes} (data, attributes and ordering key)` };
  return { ok: true, message: { data, attributes, orderingKey, bytes } };
}

/** A received message, as @google-cloud/pubsub's `Message` (and the REST/v1 shapes) hand it over. */
export interface PubSubMessageLike {
  readonly data: Buffer | Uint8Array | string | null | undefined;
  readonly attributes?: Readonly<Record<string, string>> | null;
  readonly orderingKey?: string | null;
}

export type ParsedPubSubMessage = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Reads a message written by PubSubTransport back into an event. The
 * destination is the `txbox-destination` attribute, else `destination`.
 * Only `txbox-id` and `txbox-type` are required; the key is the ordering key,
 * else the `txbox-key` attribute, else `aggregateType:aggregateId`. Messages name the field, never its
 * value. Consumers dedup by `event.id`: Pub/Sub delivers at least once.
 *
 * @example
 * subscription.on('message', async (m) => {
 *   const parsed = parsePubSubMessage(m, 'orders');
 *   if (parsed.ok) await processUntilSettled(inbox, parsed.event, signal);
 * });
 */
export function parsePubSubMessage(message: PubSubMessageLike, destination = ''): ParsedPubSubMessage {
  const a = new Map<string, string>();
  const headers: Record<string, string> = {};
  for (const [name, text] of Object.entries(message.attributes ?? {})) {
    if (typeof text !== 'string') continue;
    const lower = name.toLowerCase();
    if (lower.startsWith('txbox-')) a.set(lower, text);
    else if (!(lower === PUBSUB_ATTRIBUTE.contentType && text === DEFAULT_CONTENT_TYPE)) ownHeader(headers, name, text);
  }
  const data = message.data;
  const body = data === null || data === undefined || data.length === 0 ? null : typeof data === 'string' ? data : Buffer.from(data).toString('utf8');
  const key = (aggregateType: string, aggregateId: string): string => message.orderingKey || a.get(PUBSUB_ATTRIBUTE.key) || `${aggregateType}:${aggregateId}`;
  return eventFromTxboxFields(a, body, { what: 'attribute', bodyName: 'data', key, destination, headers });
}
