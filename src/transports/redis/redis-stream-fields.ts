/**
 * The stream entry RedisTransport writes for one event, and its reader for
 * consumers. Fields, all strings: `id`, `type`, `aggregateType`,
 * `aggregateId`, `key`, `version` (absent when null), `occurredAt` (ISO 8601),
 * `headers` (JSON object), `payload` (JSON), and the trace context of the
 * headers again as fields of their own (`traceparent`, `tracestate`), where
 * tools that read streams look for it. The entry's own stream id
 * (`1718000000000-0`) is Redis's; the event `id` field is the dedup key.
 */
import { ownHeader, payloadText, type OutboxEvent } from '../../core/envelope.ts';
import { checkedInbound } from '../../core/inbound-event.ts';

/**
 * The XADD field list of an event: `[name, value, name, value, ...]`.
 * Throws when the payload or headers cannot be serialized to JSON.
 */
export function encodeStreamFields(event: OutboxEvent): string[] {
  const fields = [
    'id',
    event.id,
    'type',
    event.type,
    'aggregateType',
    event.aggregateType,
    'aggregateId',
    event.aggregateId,
    'key',
    event.key,
  ];
  if (event.version !== null) fields.push('version', String(event.version));
  fields.push('occurredAt', event.occurredAt.toISOString(), 'headers', JSON.stringify(event.headers), 'payload', payloadText(event) ?? 'null');
  const headers = event.headers;
  if (headers) {
    for (const name of TRACE_FIELDS) {
      const value = headers[name];
      if (typeof value === 'string' && Object.hasOwn(headers, name)) fields.push(name, value);
    }
  }
  return fields;
}

/** Trace context headers that also travel as fields of their own. */
const TRACE_FIELDS = ['traceparent', 'tracestate'] as const;

/** Bytes of an entry as Redis stores it: every field name and value, UTF-8. */
export function entryBytes(fields: readonly string[]): number {
  let bytes = 0;
  for (const f of fields) bytes += Buffer.byteLength(f, 'utf8');
  return bytes;
}

export type ParsedStreamEntry = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Reads an entry written by RedisTransport back into an event (the field list
 * of an XRANGE or XREAD entry). Only `id` and `type` are required; a
 * `traceparent` or `tracestate` field joins `headers` unless they have it. Messages
 * name the field, never its value. Consumers dedup by `event.id`: Redis keeps
 * every copy of a re-published event.
 *
 * @example
 * for (const [streamId, fields] of await redis.xrange('txbox:orders', '-', '+')) {
 *   const parsed = parseStreamEntry(fields, 'orders');
 *   if (parsed.ok && !(await seen(parsed.event.id))) await handle(parsed.event);
 * }
 */
export function parseStreamEntry(fields: readonly (string | Buffer)[], destination = ''): ParsedStreamEntry {
  const v = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) v.set(String(fields[i]), String(fields[i + 1]));
  const id = v.get('id');
  const type = v.get('type');
  if (!id) return bad('the entry has no "id" field');
  if (!type) return bad('the entry has no "type" field');
  let headers: unknown = {};
  let payload: unknown = null;
  try {
    headers = JSON.parse(v.get('headers') ?? '{}');
  } catch {
    return bad('"headers" is not valid JSON');
  }
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers) || Object.values(headers).some((h) => typeof h !== 'string')) {
    return bad('"headers" must be a JSON object of strings');
  }
  try {
    payload = JSON.parse(v.get('payload') ?? 'null');
  } catch {
    return bad('"payload" is not valid JSON');
  }
  const versionText = v.get('version');
  const version = versionText === undefined ? null : Number(versionText);
  if (version !== null && !Number.isSafeInteger(version)) return bad('"version" must be an integer');
  const occurredAt = new Date(v.get('occurredAt') ?? Date.now());
  if (Number.isNaN(occurredAt.getTime())) return bad('"occurredAt" must be an ISO 8601 date');
  for (const name of TRACE_FIELDS) {
    // An entry from another writer may carry the trace context only as fields.
    const value = v.get(name);
    if (value !== undefined && !Object.hasOwn(headers, name)) ownHeader(headers as Record<string, string>, name, value);
  }
  const aggregateType = v.get('aggregateType') ?? '';
  const aggregateId = v.get('aggregateId') ?? '';
  return checkedInbound({
    id,
    type,
    aggregateType,
    aggregateId,
    key: v.get('key') ?? `${aggregateType}:${aggregateId}`,
    destination,
    payload,
    headers: headers as Record<string, string>,
    occurredAt,
    version,
  });
}

function bad(message: string): ParsedStreamEntry {
  return { ok: false, message };
}
