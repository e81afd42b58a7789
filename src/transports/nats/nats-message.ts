/**
 * One event as a JetStream message: the payload as JSON in the body, the
 * envelope's other fields in `txbox-*` headers, the event's own headers
 * (trace context) as they are. `Nats-Msg-Id` and `Nats-Expected-Stream` are
 * added by the JetStream client from the publish options.
 */
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';
import type { OutboxEvent } from '../../core/envelope.ts';

export const HEADER = {
  msgId: 'Nats-Msg-Id',
  expectedStream: 'Nats-Expected-Stream',
  type: 'txbox-type',
  key: 'txbox-key',
  aggregateType: 'txbox-aggregate-type',
  aggregateId: 'txbox-aggregate-id',
  version: 'txbox-version',
  occurredAt: 'txbox-occurred-at',
  contentType: 'content-type',
} as const;

export interface NatsMessage {
  readonly headers: MsgHdrs;
  readonly body: Uint8Array;
  /** Body plus encoded headers (including the two the client adds): what the server compares with max_payload. */
  readonly bytes: number;
}

export type BuiltMessage = { readonly ok: true; readonly message: NatsMessage } | { readonly ok: false; readonly reason: string };

/** Printable ASCII except `:`: what a NATS header name may contain. */
const HEADER_NAME = /^[!-9;-~]+$/;
/** `NATS/1.0\r\n` before the headers, `\r\n` after them. */
const HEADER_FRAME_BYTES = 12;

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
    json = JSON.stringify(event.payload);
  } catch (err) {
    return { ok: false, reason: `the payload cannot be serialized to JSON (${err instanceof Error ? err.message : String(err)})` };
  }
  const body = Buffer.from(json ?? 'null', 'utf8');
  const h = natsHeaders();
  let headerBytes = HEADER_FRAME_BYTES + entryBytes(HEADER.msgId, event.id);
  if (expectedStream !== null) headerBytes += entryBytes(HEADER.expectedStream, expectedStream);
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
    h.set(name, value);
    headerBytes += entryBytes(name, value);
  }
  const own: [string, string][] = [
    [HEADER.type, event.type],
    [HEADER.key, event.key],
    [HEADER.aggregateType, event.aggregateType],
    [HEADER.aggregateId, event.aggregateId],
    [HEADER.occurredAt, event.occurredAt.toISOString()],
    [HEADER.contentType, contentType],
  ];
  if (event.version !== null && event.version !== undefined) own.push([HEADER.version, String(event.version)]);
  for (const [name, value] of own) {
    const problem = valueProblem(value);
    if (problem) return { ok: false, reason: `${name} ${problem}` };
    h.set(name, value);
    headerBytes += entryBytes(name, value);
  }
  return { ok: true, message: { headers: h, body, bytes: body.length + headerBytes } };
}

/** Why a header value cannot travel unchanged, or null. */
function valueProblem(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  if (/[\r\n]/.test(value)) return 'contains CR or LF, which a NATS header cannot carry';
  if (value.trim() !== value) return 'has leading or trailing whitespace, which nats.js would trim';
  return null;
}

/** `name: value\r\n` in bytes. */
function entryBytes(name: string, value: string): number {
  return name.length + 2 + Buffer.byteLength(value, 'utf8') + 2;
}
