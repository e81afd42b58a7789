import type { OutboxEvent } from './envelope.ts';

/**
 * Checks on a received event before the inbox stores it. PostgreSQL refuses
 * some values outright (a NUL character in text, `\u0000` in jsonb, an id
 * that is not a UUID): an event carrying one can never be stored, so a
 * consumer must dead-letter it instead of retrying it forever. Shared by the
 * consumers' envelope parsers and by `Inbox.process`.
 */

const HYPHENATED = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PLAIN = /^[0-9a-f]{32}$/i;

/**
 * The canonical form of an event id (lower case, hyphenated 8-4-4-4-12, as
 * PostgreSQL prints a uuid), or null when `id` is not a UUID. Accepted forms:
 * hyphenated or 32 hex digits, any case, optionally in braces.
 *
 * @example
 * canonicalEventId('{0190A8F0-0000-7000-8000-000000000001}') // '0190a8f0-0000-7000-8000-000000000001'
 */
export function canonicalEventId(id: unknown): string | null {
  if (typeof id !== 'string' || id.length > 38) return null;
  const bare = id.startsWith('{') && id.endsWith('}') ? id.slice(1, -1) : id;
  if (HYPHENATED.test(bare)) return bare.toLowerCase();
  if (!PLAIN.test(bare)) return null;
  const h = bare.toLowerCase();
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** An id quoted for an error message: JSON, at most 60 characters, no control characters. */
export function quoteId(id: unknown): string {
  const text = JSON.stringify(typeof id === 'string' ? (id.length > 60 ? `${id.slice(0, 57)}...` : id) : String(id));
  return text.replace(/[\u0000-\u001f\u007f]/g, '?');
}

/** A surrogate escaped in JSON text (`\ud83d`); paired ones too, so the walk then decides. */
const SURROGATE_ESCAPE = /\\u[dD][89abcdefABCDEF]/;

/** A UTF-16 surrogate without its pair (a string cut inside an emoji): JSON text carries it as an escape such as `\ud83d`, which jsonb refuses. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Text jsonb cannot hold: NUL, or a lone surrogate. */
function unstorable(text: string): boolean {
  return text.includes('\u0000') || LONE_SURROGATE.test(text);
}

/** Where in `value` a string (or an object key) holds U+0000 or a lone surrogate, as a JSON path; null when none does. */
function nulPath(value: unknown, path: string, depth: number): string | null {
  if (typeof value === 'string') return unstorable(value) ? path : null;
  if (value === null || typeof value !== 'object' || depth > 200) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulPath(value[i], `${path}[${i}]`, depth + 1);
      if (found) return found;
    }
    return null;
  }
  if (value instanceof Date) return null;
  for (const [k, v] of Object.entries(value)) {
    if (unstorable(k)) return `${path} (an object key)`;
    const found = nulPath(v, `${path}.${k.replace(/[^\w$-]/g, '?')}`, depth + 1);
    if (found) return found;
  }
  return null;
}

/**
 * Why the inbox can never store `event`, naming the field (never its value,
 * except an id); null when it can. Checks: `id` is a UUID; `type`, `key`,
 * `aggregateType`, `aggregateId`, `destination` and header names and values
 * are strings without NUL; the payload has no `\u0000` (jsonb refuses it);
 * `version` is null or a safe integer; `occurredAt` is a valid date.
 * `payloadText`: the payload's JSON text as the broker carried it, when the
 * parser has it: searched for an escaped NUL instead of walking the payload.
 */
/** Events a consumer's parser checked (checkedInbound): the inbox's own check passes them at once. */
const checked = new WeakSet<OutboxEvent>();

export function inboundEventProblem(event: OutboxEvent, payloadText?: string): string | null {
  // Checked already by the consumer's parser (checkedInbound): the inbox does not walk it again.
  if (checked.has(event)) return null;
  if (canonicalEventId(event.id) === null) {
    return `id: ${quoteId(event.id)} is not a UUID (8-4-4-4-12 hex digits); the inbox cannot store it, so it is dead-lettered without running the handler`;
  }
  for (const field of ['type', 'key', 'aggregateType', 'aggregateId', 'destination'] as const) {
    const value: unknown = event[field];
    if (typeof value !== 'string') return `${field}: must be a string (event ${quoteId(event.id)})`;
    if (value.includes('\u0000')) return `${field}: contains a NUL character (U+0000), which PostgreSQL text cannot hold (event ${quoteId(event.id)})`;
    if (LONE_SURROGATE.test(value)) return `${field}: contains a lone UTF-16 surrogate (half of a character), which the inbox's JSON cannot hold (event ${quoteId(event.id)})`;
  }
  if (event.type === '') return `type: is empty (event ${quoteId(event.id)})`;
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    if (name.includes('\u0000') || (typeof value === 'string' && value.includes('\u0000'))) {
      return `headers: a header contains a NUL character (U+0000), which PostgreSQL jsonb cannot hold (event ${quoteId(event.id)})`;
    }
    if (LONE_SURROGATE.test(name) || (typeof value === 'string' && LONE_SURROGATE.test(value))) {
      return `headers: a header contains a lone UTF-16 surrogate (half of a character), which PostgreSQL jsonb cannot hold (event ${quoteId(event.id)})`;
    }
  }
  if (event.version !== null && event.version !== undefined && !Number.isSafeInteger(event.version)) {
    return `version: must be null or an integer (event ${quoteId(event.id)})`;
  }
  if (!(event.occurredAt instanceof Date) || Number.isNaN(event.occurredAt.getTime())) return `occurredAt: is not a valid date (event ${quoteId(event.id)})`;
  const text = event.payloadJson ?? payloadText;
  // Text read from a store or a broker: walk the parsed payload only when an escaped NUL or surrogate may be in it.
  const inPayload = text !== undefined && !text.includes('u0000') && !text.includes('\u0000') && !SURROGATE_ESCAPE.test(text) ? null : nulPath(event.payload, 'payload', 0);
  if (inPayload) return `${inPayload}: contains "\\u0000" (U+0000) or a lone UTF-16 surrogate, which PostgreSQL jsonb cannot hold (event ${quoteId(event.id)})`;
  return null;
}

/** Text txbox writes itself (error messages, hold reasons) made storable: NUL characters become U+FFFD. */
export function storableText(text: string, max = 2000): string {
  const cut = text.length > max ? text.slice(0, max) : text;
  return cut.includes('\u0000') ? cut.replace(/\u0000/g, '\ufffd') : cut;
}

/**
 * A parsed envelope, or why it cannot be received: the consumers' envelope
 * parsers end with it, so a message the inbox could never store is rejected
 * (dead-lettered) by the consumer before any store sees it.
 */
export function checkedInbound(event: OutboxEvent, payloadText?: string): { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string } {
  const problem = inboundEventProblem(event, payloadText);
  if (problem !== null) return { ok: false, message: problem };
  checked.add(event);
  return { ok: true, event };
}

/** The `txbox-*` names of the envelope fields, as Kafka headers and Pub/Sub attributes carry them. */
export const TXBOX_FIELD = {
  id: 'txbox-id',
  type: 'txbox-type',
  aggregateType: 'txbox-aggregate-type',
  aggregateId: 'txbox-aggregate-id',
  version: 'txbox-version',
  occurredAt: 'txbox-occurred-at',
  destination: 'txbox-destination',
} as const;

/**
 * Rebuilds an event from its `txbox-*` fields (lower-case names) and its JSON
 * body, for the codecs that carry the envelope beside the payload (Kafka
 * headers, Pub/Sub attributes). Only `txbox-id` and `txbox-type` are
 * required; messages name the field (`what`: "header", "attribute") and never
 * quote a value.
 */
export function eventFromTxboxFields(
  fields: ReadonlyMap<string, string>,
  body: string | null,
  o: { readonly what: string; readonly bodyName: string; readonly key: (aggregateType: string, aggregateId: string) => string; readonly destination: string; readonly headers: Record<string, string> },
): { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string } {
  const bad = (message: string) => ({ ok: false as const, message });
  const id = fields.get(TXBOX_FIELD.id);
  const type = fields.get(TXBOX_FIELD.type);
  if (!id) return bad(`the message has no "${TXBOX_FIELD.id}" ${o.what}`);
  if (!type) return bad(`the message has no "${TXBOX_FIELD.type}" ${o.what}`);
  let payload: unknown = null;
  if (body !== null) {
    try {
      payload = JSON.parse(body);
    } catch {
      return bad(`the ${o.bodyName} is not valid JSON`);
    }
  }
  let version: number | null = null;
  const versionText = fields.get(TXBOX_FIELD.version);
  if (versionText !== undefined) {
    version = Number(versionText);
    if (!/^-?\d+$/.test(versionText) || !Number.isSafeInteger(version)) return bad(`"${TXBOX_FIELD.version}" must be an integer`);
  }
  const occurredText = fields.get(TXBOX_FIELD.occurredAt);
  const occurredAt = occurredText === undefined ? new Date() : new Date(occurredText);
  if (Number.isNaN(occurredAt.getTime())) return bad(`"${TXBOX_FIELD.occurredAt}" must be an ISO 8601 date`);
  const aggregateType = fields.get(TXBOX_FIELD.aggregateType) ?? '';
  const aggregateId = fields.get(TXBOX_FIELD.aggregateId) ?? '';
  const destination = fields.get(TXBOX_FIELD.destination) ?? o.destination;
  return checkedInbound({ id, type, aggregateType, aggregateId, key: o.key(aggregateType, aggregateId), destination, payload, headers: o.headers, occurredAt, version });
}
