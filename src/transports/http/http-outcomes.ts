/**
 * How an HTTP answer (or its absence) becomes a PublishOutcome. Messages name
 * the status, the endpoint with credentials and query removed, and at most a
 * short cleaned excerpt of the response body; never the request payload or
 * the secret.
 */
import { STATUS_CODES, type IncomingHttpHeaders } from 'node:http';
import { TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

/**
 * Statuses that say the endpoint as a whole is unusable, not this event: a
 * wrong or rotated credential (401, 403), a wrong URL (404), or a receiver that
 * says it is unavailable (503: its database is down). The relay
 * pauses the destination (circuit breaker) instead of parking every key.
 */
export function isDestinationDownStatus(status: number): boolean {
  return status === 401 || status === 403 || status === 404 || status === 503;
}

/**
 * Network errors that mean nothing answers at the endpoint's address: refused, unknown host, DNS
 * unavailable, no route, or a connect that timed out (undici's connect timeout, the system's).
 * Matched on the raw code: undici's headers and body timeouts (also shown as ETIMEDOUT) are off.
 */
const DESTINATION_DOWN_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * undici's own error codes under the system codes they stand for, so that
 * messages (and what users match in them) read as they did with node:http.
 */
const UNDICI_CODES: Readonly<Record<string, string>> = {
  UND_ERR_SOCKET: 'ECONNRESET', // the server closed the connection before a complete answer
  UND_ERR_CONNECT_TIMEOUT: 'ETIMEDOUT',
  UND_ERR_HEADERS_TIMEOUT: 'ETIMEDOUT',
  UND_ERR_BODY_TIMEOUT: 'ETIMEDOUT',
};

/** Statuses worth retrying: the receiver is slow, overloaded, or asks to try later. */
export function isRetriableStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** `https://user:pass@host/path?token=x` -> `https://host/path?<redacted>`: safe for errors and logs. */
export function redactUrl(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}${url.search ? '?<redacted>' : ''}`;
}

/**
 * `Retry-After` as milliseconds from now: delta-seconds or an HTTP date (a
 * date in the past means now). Undefined when absent or unparseable.
 */
export function parseRetryAfter(value: string | undefined, nowMs: number = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Math.min(Number(trimmed), 86_400 * 365) * 1000;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

const TEXTUAL = /^(?:text\/|application\/(?:[\w.+-]*\+)?(?:json|xml)|application\/x-www-form-urlencoded)/i;

/**
 * A short, single-line excerpt of an error response body, or '' when the body
 * is empty, binary or excerpts are disabled (`maxChars` 0).
 */
export function bodyExcerpt(chunks: readonly Buffer[], contentType: string | undefined, maxChars: number): string {
  if (maxChars === 0 || chunks.length === 0) return '';
  if (contentType !== undefined && !TEXTUAL.test(contentType)) return '';
  const text = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/[\u0000-\u001f\u007f\s]+/g, ' ')
    .trim();
  return text.length > maxChars ? `${text.slice(0, maxChars)}...` : text;
}

export interface ResponseContext {
  readonly destination: string;
  /** The endpoint, redacted. */
  readonly endpoint: string;
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly excerpt: string;
}

/** Classifies a non-2xx answer. */
export function failedResponse(r: ResponseContext): PublishOutcome {
  const head = `HTTP ${r.status}${STATUS_CODES[r.status] ? ` ${STATUS_CODES[r.status]}` : ''} from POST ${r.endpoint}`;
  const tail = r.excerpt ? `: ${r.excerpt}` : '';
  if (r.status >= 300 && r.status < 400) {
    const location = safeLocation(r.headers.location, r.endpoint);
    return fail(
      'permanent',
      `${head}${location ? ` to ${location}` : ''}: redirects are not followed; set endpoints.${r.destination} to the final URL`,
    );
  }
  if (isDestinationDownStatus(r.status)) {
    const fix =
      r.status === 404 ? `check endpoints.${r.destination}` : r.status === 503 ? 'the receiver is unavailable; events wait until it answers again' : 'check the secret and credentials the receiver expects';
    const retryAfterMs = r.status === 503 ? parseRetryAfter(single(r.headers['retry-after'])) : undefined;
    return fail('destination-down', `${head} (destination down: ${fix})${tail}`, undefined, retryAfterMs);
  }
  if (r.status >= 400 && r.status < 500 && !isRetriableStatus(r.status)) {
    return fail('permanent', `${head}${tail}`);
  }
  const retryAfterMs = parseRetryAfter(single(r.headers['retry-after']));
  const after = retryAfterMs === undefined ? '' : ` (Retry-After ${Math.ceil(retryAfterMs / 1000)} s)`;
  const unexpected = r.status < 200 || r.status >= 600 ? ' (unexpected status)' : '';
  return fail('retriable', `${head}${unexpected}${after}${tail}`, undefined, retryAfterMs);
}

/**
 * Classifies a request that got no answer. Failures to reach the address
 * (DESTINATION_DOWN_CODES) are destination-down; resets, TLS failures and
 * the rest are retriable.
 */
export function networkFailure(err: unknown, endpoint: string): PublishOutcome {
  const e = err as NodeJS.ErrnoException;
  const raw = typeof e?.code === 'string' ? e.code : 'ERROR';
  const code = UNDICI_CODES[raw] ?? raw;
  const detail = e instanceof Error ? e.message : String(err);
  const down = DESTINATION_DOWN_CODES.has(raw) || (raw === 'ETIMEDOUT' && (e as { syscall?: unknown }).syscall === 'connect');
  return fail(down ? 'destination-down' : 'retriable', `${code}: POST ${endpoint} failed (${detail})`, err);
}

/** No request of the call got a connection within timeoutMs: nothing answers at the endpoint's address. */
export function unreachableFailure(endpoint: string, timeoutMs: number): PublishOutcome {
  return fail('destination-down', `ETIMEDOUT: POST ${endpoint}: no connection to the endpoint within ${timeoutMs} ms (timeoutMs); the host does not answer`);
}

export function timeoutFailure(endpoint: string, timeoutMs: number): PublishOutcome {
  return fail('retriable', `ETIMEDOUT: POST ${endpoint} got no complete answer within ${timeoutMs} ms (timeoutMs)`);
}

export function abortedFailure(endpoint: string): PublishOutcome {
  return fail('retriable', `aborted: POST ${endpoint} was cancelled by the caller's signal before an answer`);
}

export function fail(kind: TransportErrorKind, message: string, cause?: unknown, retryAfterMs?: number): PublishOutcome {
  const options: { cause?: unknown; retryAfterMs?: number } = {};
  if (cause !== undefined) options.cause = cause;
  if (retryAfterMs !== undefined) options.retryAfterMs = retryAfterMs;
  return { ok: false, error: new TransportError(kind, message, options) };
}

function safeLocation(location: string | undefined, base: string): string | null {
  if (!location) return null;
  try {
    return redactUrl(new URL(location, base));
  } catch {
    return null;
  }
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
