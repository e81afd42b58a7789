import type { OutgoingHttpHeaders } from 'node:http';
import type { RequestOptions } from 'node:https';
import type { ConnectionOptions, SecureContextOptions } from 'node:tls';
import type { KeyObject } from 'node:crypto';
import { urlToHttpOptions } from 'node:url';
import { ConfigError } from '../../core/errors.ts';
import { ceHeaderValue, isValidHeaderValue, staticHeaderProblem } from './http-headers.ts';
import { redactUrl } from './http-outcomes.ts';
import { missingSecretError, webhookKey, type WebhookSecret } from './webhook-signature.ts';

/** TLS settings for https endpoints, passed to the https agent as they are. */
export type HttpTransportTlsOptions = SecureContextOptions &
  Pick<ConnectionOptions, 'rejectUnauthorized' | 'servername' | 'checkServerIdentity'>;

/**
 * Options of `new HttpTransport(...)`; every field but `endpoints` has a default.
 *
 * @example
 * const options: HttpTransportOptions = { endpoints: { orders: 'https://hooks.example.com/orders' }, secret: 'whsec_...', timeoutMs: 5000 };
 */
export interface HttpTransportOptions {
  /**
   * The URL each destination's events are POSTed to, e.g.
   * `{ orders: 'https://hooks.example.com/orders' }`. Required, at least one.
   * http: and https: only. Userinfo (`https://user:pass@host/`) is sent as
   * Basic auth; it and the query string are redacted in every error message.
   */
  readonly endpoints: Readonly<Record<string, string | URL>>;
  /**
   * Standard Webhooks signing secret: `whsec_<base64>` (the spec's format),
   * any other string (used as its UTF-8 bytes, not base64-decoded), raw bytes,
   * or a KeyObject; at least 16 bytes. Required unless `allowUnsigned` is
   * true: a missing secret (say, an unset environment variable) throws.
   * Generate one with `npx txbox secret` or `generateWebhookSecret()`.
   */
  readonly secret?: WebhookSecret | undefined;
  /**
   * Sends requests without `webhook-timestamp` and `webhook-signature`
   * headers when no `secret` is given (`webhook-id` is always sent). Only for
   * tests and trusted networks. Default: false (no secret throws).
   */
  readonly allowUnsigned?: boolean;
  /** The CloudEvents `ce-source` header. Default: `'txbox'`. */
  readonly source?: string;
  /**
   * Longest time from sending a request to the end of its answer, in ms;
   * past it the request is destroyed and the event counts as retriable.
   * Default: 10000.
   */
  readonly timeoutMs?: number;
  /** Sockets per origin (host and port) in the keep-alive pool; more requests queue. Default: 64. */
  readonly maxSockets?: number;
  /**
   * Static headers added to every request, e.g. `{ authorization: 'Bearer ...' }`.
   * They win over event headers of the same name; they cannot replace
   * framing, `content-type`, `ce-*` or `webhook-*` headers. Default: none.
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** TLS options for https endpoints (`ca`, `cert`, `key`, `rejectUnauthorized`, ...). Default: Node's defaults. */
  readonly tls?: HttpTransportTlsOptions;
  /**
   * At most this many characters of a failed response's body go into the
   * error message (textual bodies only, whitespace collapsed); 0 leaves the
   * body out, for receivers that might echo what they were sent. Default: 200.
   */
  readonly errorBodyChars?: number;
}

/** One endpoint, ready to send to. `display` is the redacted URL for messages. */
export interface ResolvedHttpEndpoint {
  readonly destination: string;
  readonly display: string;
  readonly secure: boolean;
  /** protocol, hostname, port, path and auth, from the URL. */
  readonly request: Readonly<RequestOptions>;
}

/** HttpTransportOptions after `resolveHttpTransportOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedHttpTransportOptions {
  readonly endpoints: ReadonlyMap<string, ResolvedHttpEndpoint>;
  /** Null when unsigned (only with `allowUnsigned: true`). */
  readonly signingKey: KeyObject | null;
  /** Already encoded for the header. */
  readonly source: string;
  readonly timeoutMs: number;
  readonly maxSockets: number;
  /** Lower-case names. */
  readonly headers: Readonly<OutgoingHttpHeaders>;
  readonly tls: Readonly<HttpTransportTlsOptions>;
  readonly errorBodyChars: number;
}

/**
 * Validates HttpTransport options, fills defaults and freezes them. Throws
 * ConfigError naming the field (`endpoints.orders`, `timeoutMs`, ...) and the fix.
 *
 * @example
 * const resolved = resolveHttpTransportOptions({ endpoints: { orders: 'https://hooks.example.com/orders' } });
 */
export function resolveHttpTransportOptions(options: HttpTransportOptions): ResolvedHttpTransportOptions {
  if (options === null || typeof options !== 'object') {
    throw new ConfigError('options', 'must be an object such as { endpoints: { orders: "https://hooks.example.com/orders" } }');
  }
  const source = options.source ?? 'txbox';
  if (typeof source !== 'string' || source.length === 0 || source.length > 1024) {
    throw new ConfigError('source', 'must be a non-empty string (a URI-reference naming the producer), e.g. "urn:service:orders"');
  }
  const tls = options.tls ?? {};
  if (typeof tls !== 'object' || tls === null) throw new ConfigError('tls', 'must be an object of TLS options (ca, cert, key, rejectUnauthorized, ...)');
  const allowUnsigned = options.allowUnsigned ?? false;
  if (typeof allowUnsigned !== 'boolean') throw new ConfigError('allowUnsigned', 'must be true or false');
  const resolved: ResolvedHttpTransportOptions = Object.freeze({
    endpoints: resolveEndpoints(options.endpoints),
    signingKey: options.secret === undefined ? null : webhookKey(options.secret, 'secret'),
    source: ceHeaderValue(source),
    timeoutMs: int('timeoutMs', options.timeoutMs, 10_000, 1, 3_600_000),
    maxSockets: int('maxSockets', options.maxSockets, 64, 1, 65_536),
    headers: resolveHeaders(options.headers),
    tls: Object.freeze({ ...tls }),
    errorBodyChars: int('errorBodyChars', options.errorBodyChars, 200, 0, 4000),
  });
  // Checked last, so that a malformed setting is reported first, by its own name.
  if (options.secret === undefined && !allowUnsigned) throw missingSecretError('sender');
  return resolved;
}

function resolveEndpoints(endpoints: HttpTransportOptions['endpoints'] | undefined): ReadonlyMap<string, ResolvedHttpEndpoint> {
  const example = 'e.g. { orders: "https://hooks.example.com/orders" }';
  if (endpoints === null || typeof endpoints !== 'object' || Object.keys(endpoints).length === 0) {
    throw new ConfigError('endpoints', `is required: map each destination to the URL its events are POSTed to, ${example}`);
  }
  const map = new Map<string, ResolvedHttpEndpoint>();
  for (const [destination, raw] of Object.entries(endpoints)) {
    const field = `endpoints.${destination}`;
    if (destination.length === 0) throw new ConfigError('endpoints', `has an empty destination name; ${example}`);
    const hostPort = typeof raw === 'string' ? /^([A-Za-z0-9.-]+:\d+)(\/|\?|$)/.exec(raw)?.[1] : undefined;
    if (hostPort !== undefined) {
      // "localhost:8089/hook" would parse as the scheme "localhost:". Only host and port are quoted: the rest may hold a token.
      throw new ConfigError(field, `has no scheme; write it as "http://${hostPort}/..." or "https://${hostPort}/..."`);
    }
    let url: URL;
    try {
      if (typeof raw !== 'string' && !(raw instanceof URL)) throw new TypeError('not a string');
      url = new URL(raw);
    } catch (err) {
      // The value itself is not quoted: it may hold credentials.
      throw new ConfigError(field, 'is not an absolute URL; write it as "https://host[:port]/path"', { cause: err });
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new ConfigError(field, `uses ${url.protocol} but only http: and https: are supported; write it as "https://host[:port]/path"`);
    }
    if (url.hostname === '') throw new ConfigError(field, 'has no host name; write it as "https://host[:port]/path"');
    const { protocol, hostname, port, path, auth } = urlToHttpOptions(url);
    const request: RequestOptions = { protocol, hostname, path, method: 'POST' };
    if (port !== undefined && port !== '') request.port = port;
    if (auth) request.auth = auth;
    map.set(destination, Object.freeze({ destination, display: redactUrl(url), secure: url.protocol === 'https:', request: Object.freeze(request) }));
  }
  return map;
}

function resolveHeaders(headers: Readonly<Record<string, string>> | undefined): Readonly<OutgoingHttpHeaders> {
  const out: Record<string, string> = { 'user-agent': 'txbox' };
  if (headers === undefined) return Object.freeze(out);
  if (headers === null || typeof headers !== 'object') throw new ConfigError('headers', 'must be an object of header names to string values');
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    const problem = staticHeaderProblem(lower);
    if (problem) throw new ConfigError(`headers.${name}`, problem);
    if (!isValidHeaderValue(value)) {
      throw new ConfigError(`headers.${name}`, 'must be a string without control characters (CR, LF, NUL) or characters above U+00FF');
    }
    out[lower] = value;
  }
  return Object.freeze(out);
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
