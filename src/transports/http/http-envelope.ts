/**
 * Reading the JSON envelope HttpTransport sends (`{ id, type, aggregateType,
 * aggregateId, key, destination, payload, headers, occurredAt, version }`).
 * Only `id` and `type` are required, so that bodies from other senders that
 * follow the same shape can be received too.
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import { checkedInbound } from '../../core/inbound-event.ts';

export type ParsedEnvelope = { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string };

/**
 * Parses and checks an envelope; messages name the field, never its value.
 * Verify the signature on the raw bytes first.
 *
 * @example
 * const parsed = parseEnvelope(rawBody);
 * if (!parsed.ok) return res.writeHead(400).end(parsed.message);
 * await handle(parsed.event);
 */
export function parseEnvelope(body: Buffer | string): ParsedEnvelope {
  let value: unknown;
  try {
    value = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  } catch {
    return bad('the body is not valid JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return bad('the body must be a JSON object (the event envelope)');
  const v = value as Record<string, unknown>;
  if (typeof v.id !== 'string' || v.id === '') return bad('the envelope has no "id" string');
  if (typeof v.type !== 'string' || v.type === '') return bad('the envelope has no "type" string');
  for (const field of ['aggregateType', 'aggregateId', 'key', 'destination', 'occurredAt'] as const) {
    if (v[field] !== undefined && typeof v[field] !== 'string') return bad(`"${field}" must be a string`);
  }
  if (v.version !== undefined && v.version !== null && !Number.isSafeInteger(v.version)) return bad('"version" must be an integer or null');
  const headers = v.headers ?? {};
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers) || Object.values(headers).some((h) => typeof h !== 'string')) {
    return bad('"headers" must be an object of strings');
  }
  const occurredAt = typeof v.occurredAt === 'string' ? new Date(v.occurredAt) : new Date();
  if (Number.isNaN(occurredAt.getTime())) return bad('"occurredAt" must be an ISO 8601 date');
  const aggregateType = (v.aggregateType as string | undefined) ?? '';
  const aggregateId = (v.aggregateId as string | undefined) ?? '';
  return checkedInbound({
    id: v.id,
    type: v.type,
    aggregateType,
    aggregateId,
    key: (v.key as string | undefined) ?? `${aggregateType}:${aggregateId}`,
    destination: (v.destination as string | undefined) ?? '',
    payload: v.payload === undefined ? null : v.payload,
    headers: headers as Record<string, string>,
    occurredAt,
    version: (v.version as number | null | undefined) ?? null,
  });
}

function bad(message: string): ParsedEnvelope {
  return { ok: false, message };
}
