/**
 * One event as a JetStream message: the payload as JSON in the body, the
 * envelope's other fields in `txbox-*` headers, the event's own headers
 * (trace context) as they are, and `Nats-Msg-Id` (the event id) and
 * `Nats-Expected-Stream` for JetStream. `parseNatsMessage`
 * reads such a message back into the envelope.
 */
import type { MsgHdrs } from '@nats-io/transport-node';
import { ownHeader, payloadText, type OutboxEvent } from '../../core/envelope.ts';
import { checkedInbound } from '../../core/inbound-event.ts';
import { thrownText } from '../../core/error-text.ts';

export const HEADER = {
  msgId: 'Nats-Msg-Id',
  expectedStream: 'Nats-Expected-Stream',
  type: 'txbox-type',
  destination: 'txbox-destination',
  key: 'txbox-key',
  aggregateType: 'txbox-aggregate-type',
  aggregateId: 'txbox-aggregate-id',
  version: 'txbox-version',
  occurredAt: 'txbox-occurred-at',
  contentType: 'content-type',
} as const;

export interface NatsMessage {
  /**
   * The header block as it goes on the wire: `NATS/1.0\r\n`, then
   * `name: value\r\n` per header, then `\r\n`, the bytes nats.js's
   * `MsgHdrs.encode()` makes of the same headers appended in the same order
   * (test/unit/nats-message.test.ts compares them). Built as one string: the
   * MsgHdrs API searched its keys and validated each name and value again per
   * append, about a tenth of a relay's CPU when draining to NATS.
   */
  readonly headers: Uint8Array;
  readonly body: Uint8Array;
  /** Body plus encoded headers: what the server compares with max_payload. */
  readonly bytes: number;
}

export type BuiltMessage = { readonly ok: true; readonly message: NatsMessage } | { readonly ok: false; readonly reason: string };

/** Printable ASCII except `:`: what a NATS header name may contain. */
const HEADER_NAME = /^[!-9;-~]+$/;
/** Before the headers; `\r\n` ends them. */
const HEADER_START = 'NATS/1.0\r\n';

/**
 * Builds the message, or says why the event cannot travel: a payload JSON
 * cannot represent, or a header nats.js would refuse or alter (a value with
 * CR/LF or leading/trailing whitespace, which it trims). Event headers named
 * `Nats-*` or `txbox-*` are refused too: `Nats-*` headers steer JetStream
 * (`Nats-Rollup` purges a stream). An event's `content-type` replaces the
 * default `application/json`. Reasons never quote a value.
 */
export function buildMessage(event: OutboxEvent, expectedStream: string | null): BuiltMessage {
  let json: string | undefined;
  try {
    json = payloadText(event);
  } catch (err) {
    return { ok: false, reason: `the payload cannot be serialized to JSON (${thrownText(err)})` };
  }
  const body = Buffer.from(json ?? 'null', 'utf8');
  // Names are distinct here (event headers named like txbox's are refused), so each is one line.
  // Nats-Msg-Id: the stream drops a re-publish within its duplicate window. Nats-Expected-Stream:
  // the stream that stores the message must be this one, or the publish fails (err_code 10060);
  // the transport's options checked its name.
  const idProblem = fieldProblem(HEADER.msgId, event.id);
  if (idProblem !== null) return { ok: false, reason: idProblem };
  let block = `${HEADER_START}${HEADER.msgId}: ${event.id}\r\n`;
  if (expectedStream !== null) block += `${HEADER.expectedStream}: ${expectedStream}\r\n`;
  let contentType = 'application/json';
  const eventHeaders = event.headers ?? {};
  for (const name in eventHeaders) {
    const value = eventHeaders[name]!;
    const lower = name.toLowerCase();
    if (lower === HEADER.contentType) {
      const problem = valueProblem(value);
      if (problem) return { ok: false, reason: `event header ${JSON.stringify(name)} ${problem}` };
      contentType = value;
      continue;
    }
    if (lower.startsWith('nats-') || lower.startsWith('txbox-')) {
      return { ok: false, reason: `event header ${JSON.stringify(name)} is reserved: Nats-* headers steer JetStream and txbox-* headers are set by txbox; rename it` };
    }
    if (!HEADER_NAME.test(name)) return { ok: false, reason: `event header ${JSON.stringify(name)} is not a valid NATS header name (printable ASCII without ":" or spaces)` };
    const problem = valueProblem(value);
    if (problem) return { ok: false, reason: `event header ${JSON.stringify(name)} ${problem}` };
    block += `${name}: ${value}\r\n`;
  }
  // Checked one by one, then written in one template: no closure or list per event (the relay's hot path).
  const occurredAt = event.occurredAt.toISOString();
  const version = event.version !== null && event.version !== undefined ? String(event.version) : null;
  const problem =
    fieldProblem(HEADER.type, event.type) ??
    fieldProblem(HEADER.destination, event.destination) ??
    fieldProblem(HEADER.key, event.key) ??
    fieldProblem(HEADER.aggregateType, event.aggregateType) ??
    fieldProblem(HEADER.aggregateId, event.aggregateId) ??
    fieldProblem(HEADER.contentType, contentType) ??
    (version === null ? null : fieldProblem(HEADER.version, version));
  if (problem !== null) return { ok: false, reason: problem };
  block +=
    `${HEADER.type}: ${event.type}\r\n${HEADER.destination}: ${event.destination}\r\n${HEADER.key}: ${event.key}\r\n` +
    `${HEADER.aggregateType}: ${event.aggregateType}\r\n${HEADER.aggregateId}: ${event.aggregateId}\r\n` +
    `${HEADER.occurredAt}: ${occurredAt}\r\n${HEADER.contentType}: ${contentType}\r\n`;
  if (version !== null) block += `${HEADER.version}: ${version}\r\n`;
  const headers = Buffer.from(`${block}\r\n`, 'utf8');
  return { ok: true, message: { headers, body, bytes: body.length + headers.length } };
}

/**
 * A header block built by buildMessage, for nats.js's `publish()`: it only
 * asks its `headers` option to `encode()` itself (nats-core's protocol.js),
 * so the block goes out as it is.
 */
export function encodedHeaders(block: Uint8Array): MsgHdrs {
  return { encode: () => block } as unknown as MsgHdrs;
}

/** CR, LF, or whitespace at either end (the characters `trim()` removes): what a header value cannot carry unchanged. */
const UNSENDABLE = /[\r\n]|^\s|\s$/;

/** Why a header value cannot travel unchanged, or null. */
function valueProblem(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  if (!UNSENDABLE.test(value)) return null;
  if (/[\r\n]/.test(value)) return 'contains CR or LF, which a NATS header cannot carry';
  return 'has leading or trailing whitespace, which nats.js would trim';
}

/** `name` and why its value cannot travel unchanged, or null. */
function fieldProblem(name: string, value: unknown): string | null {
  const problem = valueProblem(value);
  return problem === null ? null : `${name} ${problem}`;
}


/** The parts of a received NATS message that `parseNatsMessage` reads (a JsMsg or StoredMsg fits). */
export interface ReceivedNatsMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers?: MsgHdrs | undefined;
}

export type ParsedNatsMessage = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Reads a message NatsTransport published back into the event envelope:
 * `id` from `Nats-Msg-Id`, the payload from the JSON body, the other fields
 * from the `txbox-*` headers, and every other header except `Nats-*` as the
 * event's headers (`content-type` only when it is not the default
 * `application/json`). Messages name the header, never its value.
 *
 * @example
 * for await (const m of messages) {
 *   const parsed = parseNatsMessage(m);
 *   if (!parsed.ok) { m.term(); continue; }
 *   await inbox.process(parsed.event);
 *   m.ack();
 * }
 */
export function parseNatsMessage(m: ReceivedNatsMessage): ParsedNatsMessage {
  try {
    return parseHeaders(m);
  } catch (err) {
    // nats.js decodes headers on first access and throws on what it cannot read (a name with a space or
    // a non-ASCII character, a bare LF in a value), which other clients can send.
    return { ok: false, message: `the headers cannot be read (${thrownText(err)})` };
  }
}

/**
 * The message's `Nats-Msg-Id` header, or null when it has none or its
 * headers cannot be read.
 */
export function natsMessageId(m: ReceivedNatsMessage): string | null {
  try {
    return m.headers?.get(HEADER.msgId) || null;
  } catch {
    return null;
  }
}

function parseHeaders(m: ReceivedNatsMessage): ParsedNatsMessage {
  const h = m.headers;
  if (!h) return { ok: false, message: 'the message has no headers; it was not published by NatsTransport' };
  const get = (name: string): string => h.get(name);
  const id = get(HEADER.msgId);
  const type = get(HEADER.type);
  if (!id) return { ok: false, message: `the message has no ${HEADER.msgId} header` };
  if (!type) return { ok: false, message: `the message has no ${HEADER.type} header` };
  let payload: unknown;
  try {
    payload = m.data.length === 0 ? null : JSON.parse(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).toString('utf8'));
  } catch {
    return { ok: false, message: 'the body is not valid JSON' };
  }
  const occurredAtText = get(HEADER.occurredAt);
  const occurredAt = occurredAtText ? new Date(occurredAtText) : new Date();
  if (Number.isNaN(occurredAt.getTime())) return { ok: false, message: `${HEADER.occurredAt} is not an ISO 8601 date` };
  const versionText = get(HEADER.version);
  const version = versionText === '' ? null : Number(versionText);
  if (version !== null && !Number.isSafeInteger(version)) return { ok: false, message: `${HEADER.version} is not an integer` };
  const headers: Record<string, string> = {};
  for (const name of h.keys()) {
    const lower = name.toLowerCase();
    if (lower.startsWith('nats-') || lower.startsWith('txbox-')) continue;
    const value = get(name);
    if (lower === HEADER.contentType && value === 'application/json') continue;
    ownHeader(headers, name, value);
  }
  const aggregateType = get(HEADER.aggregateType);
  const aggregateId = get(HEADER.aggregateId);
  return checkedInbound({
    id,
    type,
    aggregateType,
    aggregateId,
    key: get(HEADER.key) || `${aggregateType}:${aggregateId}`,
    destination: get(HEADER.destination),
    payload,
    headers,
    occurredAt,
    version,
  });
}
