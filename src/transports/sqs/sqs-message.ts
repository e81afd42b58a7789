/**
 * The SQS (and SNS) form of an event. The body is the JSON payload alone, so
 * that any consumer reads plain JSON. The envelope travels in message
 * attributes, within SQS's limit of 10 per message:
 *
 * - `txbox-envelope`: JSON of id, type, aggregateType, aggregateId, key,
 *   destination, occurredAt and version (always; JSON because keys and types
 *   may hold characters that an attribute value cannot);
 * - each event header (`traceparent`, ...) as a String attribute of its own,
 *   while its name is a valid attribute name and slots remain;
 * - `txbox-headers`: JSON of the headers that did not fit or cannot be an
 *   attribute name (only when there are such headers).
 *
 * On a FIFO queue or topic, MessageGroupId is the key (or `txbox-` plus a
 * hash of it when the key is not 1-128 printable ASCII characters) and
 * MessageDeduplicationId the event id.
 */
import { createHash } from 'node:crypto';
import { ownHeader, payloadText, type EventHeaders, type OutboxEvent } from '../../core/envelope.ts';
import { InvalidEventError } from '../../core/errors.ts';
import { checkedInbound } from '../../core/inbound-event.ts';

export const SQS_ATTRIBUTES = Object.freeze({ envelope: 'txbox-envelope', headers: 'txbox-headers' });

/** SQS's limit of message attributes per message (SNS forwards at most this many to SQS). */
export const MAX_ATTRIBUTES = 10;

/** The attribute shape both SQS and SNS take. */
export interface StringAttribute {
  readonly DataType: 'String';
  readonly StringValue: string;
}

export interface EncodedSqsMessage {
  readonly body: string;
  readonly attributes: Record<string, StringAttribute>;
  /** Set for FIFO queues and topics only. */
  readonly groupId: string | undefined;
  readonly deduplicationId: string | undefined;
  /** What SQS counts toward its size limit: body plus attribute names, types and values, in UTF-8 bytes. */
  readonly bytes: number;
}

/** Attribute names: letters, digits, `-`, `_`, `.`; not starting with `AWS.`/`Amazon.` (any case) or `.`, no `..`, at most 256. */
const ATTRIBUTE_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,255}$/;
/** Characters SQS refuses in bodies and attribute values (outside #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF). */
const UNSAFE_CHARS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const GROUP_ID = /^[\x21-\x7E]{1,128}$/;

/**
 * Encodes an event for SendMessageBatch (SQS) or PublishBatch (SNS). Throws
 * when the payload cannot be serialized as JSON, and InvalidEventError for an
 * event header named `txbox-*` (txbox sets those): dropping it silently would
 * deliver a different event; the relay parks it with the reason instead.
 *
 * @example
 * const m = encodeSqsMessage(event, true);
 * // { MessageBody: m.body, MessageAttributes: m.attributes, MessageGroupId: m.groupId, MessageDeduplicationId: m.deduplicationId }
 */
export function encodeSqsMessage(event: OutboxEvent, fifo: boolean): EncodedSqsMessage {
  const json = payloadText(event);
  if (json === undefined) throw new TypeError('the payload is not JSON-serializable');
  const body = escapeNonCharacters(json);
  const attributes: Record<string, StringAttribute> = {};
  const envelope = {
    id: event.id,
    type: event.type,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    key: event.key,
    destination: event.destination,
    occurredAt: event.occurredAt.toISOString(),
    version: event.version ?? null,
  };
  ownHeader(attributes, SQS_ATTRIBUTES.envelope, text(escapeNonCharacters(JSON.stringify(envelope))));
  const names = Object.keys(event.headers ?? {}).filter((n) => typeof event.headers![n] === 'string');
  for (const name of names) {
    if (name.startsWith('txbox-')) throw new InvalidEventError(`headers.${name}`, `event header ${JSON.stringify(name)} is reserved: txbox-* headers are set by txbox; rename it`);
  }
  const own = names.filter((n) => isAttributeName(n) && !UNSAFE_CHARS.test(event.headers![n]!));
  const rest = names.filter((n) => !own.includes(n));
  // One slot goes to the envelope; one more to txbox-headers if anything is left over.
  let slots = MAX_ATTRIBUTES - 1;
  if (rest.length > 0 || own.length > slots) slots -= 1;
  const leftover: Record<string, string> = {};
  own.forEach((name, i) => {
    if (i < slots) ownHeader(attributes, name, text(event.headers![name]!));
    else ownHeader(leftover, name, event.headers![name]!);
  });
  for (const name of rest) ownHeader(leftover, name, event.headers![name]!);
  if (Object.keys(leftover).length > 0) ownHeader(attributes, SQS_ATTRIBUTES.headers, text(escapeNonCharacters(JSON.stringify(leftover))));
  let bytes = Buffer.byteLength(body, 'utf8');
  for (const [name, value] of Object.entries(attributes)) bytes += Buffer.byteLength(name, 'utf8') + 'String'.length + Buffer.byteLength(value.StringValue, 'utf8');
  return {
    body,
    attributes,
    groupId: fifo ? messageGroupId(event.key) : undefined,
    deduplicationId: fifo ? event.id : undefined,
    bytes,
  };
}

/** The MessageGroupId of a key: the key itself when SQS takes it, else `txbox-` and a SHA-256 of it (same key, same group). */
export function messageGroupId(key: string): string {
  if (GROUP_ID.test(key)) return key;
  return `txbox-${createHash('sha256').update(key, 'utf8').digest('base64url')}`;
}

function isAttributeName(name: string): boolean {
  return ATTRIBUTE_NAME.test(name) && !name.includes('..') && !name.endsWith('.') && !/^(aws|amazon)\./i.test(name);
}

function text(value: string): StringAttribute {
  return { DataType: 'String', StringValue: value };
}

/** U+FFFE and U+FFFF are valid in JSON strings but not in SQS: escape them (JSON text stays equal). */
function escapeNonCharacters(json: string): string {
  return json.replace(/[\uFFFE\uFFFF]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

/** A received SQS message, as the SDK gives it (only what decoding reads). */
export interface SqsMessageLike {
  readonly MessageId?: string | undefined;
  readonly Body?: string | undefined;
  readonly MessageAttributes?: Record<string, { readonly StringValue?: string | undefined; readonly DataType?: string | undefined }> | undefined;
}

export type DecodedSqsMessage = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Rebuilds the envelope of a message published by SqsTransport (directly, or
 * through SnsTransport with raw message delivery on the subscription). The
 * receive call must ask for the attributes (`MessageAttributeNames: ['All']`).
 * Messages name the missing or bad field, never its value.
 *
 * @example
 * const { Messages } = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MessageAttributeNames: ['All'] }));
 * const decoded = decodeSqsMessage(Messages![0]!, 'orders');
 */
export function decodeSqsMessage(message: SqsMessageLike, destination: string): DecodedSqsMessage {
  const raw0 = message.MessageAttributes;
  const attrs: Record<string, { readonly StringValue?: unknown; readonly DataType?: unknown }> = {};
  if (raw0 !== null && typeof raw0 === 'object') {
    for (const [name, value] of Object.entries(raw0)) if (value !== null && typeof value === 'object') ownHeader(attrs, name, value);
  }
  const raw = attrs[SQS_ATTRIBUTES.envelope]?.StringValue;
  if (typeof raw !== 'string') return bad(`the message has no ${SQS_ATTRIBUTES.envelope} attribute (ask ReceiveMessage for MessageAttributeNames ["All"]; with SNS, turn on raw message delivery)`);
  let envelope: Record<string, unknown>;
  try {
    envelope = JSON.parse(raw) as Record<string, unknown>;
  } catch {
    return bad(`the ${SQS_ATTRIBUTES.envelope} attribute is not valid JSON`);
  }
  if (envelope === null || typeof envelope !== 'object' || Array.isArray(envelope)) return bad(`the ${SQS_ATTRIBUTES.envelope} attribute must be a JSON object`);
  for (const field of ['id', 'type', 'aggregateType', 'aggregateId', 'key', 'occurredAt'] as const) {
    if (typeof envelope[field] !== 'string') return bad(`the ${SQS_ATTRIBUTES.envelope} attribute has no string ${field}`);
  }
  const version = envelope['version'] ?? null;
  if (version !== null && !Number.isSafeInteger(version)) return bad(`the ${SQS_ATTRIBUTES.envelope} attribute's version must be an integer or null`);
  const occurredAt = new Date(envelope['occurredAt'] as string);
  if (Number.isNaN(occurredAt.getTime())) return bad(`the ${SQS_ATTRIBUTES.envelope} attribute's occurredAt must be an ISO 8601 date`);
  let payload: unknown;
  try {
    if (message.Body !== undefined && typeof message.Body !== 'string') throw new TypeError('not a string');
    payload = message.Body === undefined || message.Body === '' ? null : JSON.parse(message.Body);
  } catch {
    return bad('the body is not valid JSON');
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(attrs)) {
    if (!name.startsWith('txbox-') && typeof value.StringValue === 'string' && value.DataType === 'String') ownHeader(headers, name, value.StringValue);
  }
  const extra = attrs[SQS_ATTRIBUTES.headers]?.StringValue;
  if (extra !== undefined) {
    if (typeof extra !== 'string') return bad(`the ${SQS_ATTRIBUTES.headers} attribute is not valid JSON`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(extra);
    } catch {
      return bad(`the ${SQS_ATTRIBUTES.headers} attribute is not valid JSON`);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return bad(`the ${SQS_ATTRIBUTES.headers} attribute must be a JSON object of strings`);
    for (const [name, value] of Object.entries(parsed)) {
      if (typeof value !== 'string') return bad(`the ${SQS_ATTRIBUTES.headers} attribute must be a JSON object of strings`);
      ownHeader(headers, name, value);
    }
  }
  return checkedInbound({
    id: envelope['id'] as string,
    type: envelope['type'] as string,
    aggregateType: envelope['aggregateType'] as string,
    aggregateId: envelope['aggregateId'] as string,
    key: envelope['key'] as string,
    destination: typeof envelope['destination'] === 'string' ? envelope['destination'] : destination,
    payload,
    headers: headers as EventHeaders,
    occurredAt,
    version: version as number | null,
  }, typeof message.Body === 'string' && message.Body !== '' ? message.Body : undefined);
}

function bad(message: string): DecodedSqsMessage {
  return { ok: false, message };
}
