/**
 * Header rules shared by the HTTP transport: which names an event or the
 * configuration may set, and how CloudEvents header values are encoded.
 */

/** An RFC 9110 token: the characters a header name may contain. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What Node accepts in a header value: no CR, LF, NUL or other control characters, nothing above U+00FF. */
const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

/**
 * Names txbox sets itself or that change how the message is framed, routed or
 * authenticated. Neither an event nor the static `headers` option may set them.
 */
const RESERVED = new Set([
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'content-length',
  'content-type',
  'content-encoding',
]);
const RESERVED_PREFIXES = ['ce-', 'webhook-', 'proxy-', ':'];
/** Credentials belong in the static configuration, never in an event. */
const EVENT_FORBIDDEN = new Set(['authorization', 'cookie', 'set-cookie']);

export function isValidHeaderValue(value: unknown): value is string {
  return typeof value === 'string' && !INVALID_VALUE.test(value);
}

/** Why a static header name is refused, or null when it is fine. Expects a lower-case name. */
export function staticHeaderProblem(lower: string): string | null {
  if (!TOKEN.test(lower)) return 'is not a valid header name (letters, digits and !#$%&\'*+.^_`|~- only)';
  if (RESERVED.has(lower) || RESERVED_PREFIXES.some((p) => lower.startsWith(p))) {
    return 'is set by txbox itself (framing, CloudEvents or Standard Webhooks headers) and cannot be overridden';
  }
  return null;
}

const CACHE_LIMIT = 512;
/** Event header name -> its lower-case form when safe to forward, or null. Bounded: names are few in practice. */
const eventNameCache = new Map<string, string | null>();

/**
 * The lower-case header name to forward an event header under, or null when
 * it must not travel as an HTTP header (it still travels in the body's
 * `headers`). Refused: invalid names, framing and hop-by-hop headers, txbox's
 * own `ce-*` and `webhook-*` headers, and credentials.
 */
export function forwardableHeaderName(name: string): string | null {
  const cached = eventNameCache.get(name);
  if (cached !== undefined) return cached;
  const lower = name.toLowerCase();
  const result = staticHeaderProblem(lower) === null && !EVENT_FORBIDDEN.has(lower) ? lower : null;
  if (eventNameCache.size < CACHE_LIMIT) eventNameCache.set(name, result);
  return result;
}

/** Characters a CloudEvents HTTP header value may carry as is: printable ASCII except `"` and `%`. */
const CE_NEEDS_ENCODING = /[^\x21\x23\x24\x26-\x7e]/;
const CE_ENCODE_RUNS = /[^\x21\x23\x24\x26-\x7e]+/g;

/**
 * Percent-encodes a CloudEvents attribute value for an HTTP header, as the
 * CloudEvents HTTP binding requires: space, `"`, `%` and everything outside
 * printable ASCII, as UTF-8.
 */
export function ceHeaderValue(value: string): string {
  if (!CE_NEEDS_ENCODING.test(value)) return value;
  return value.replace(CE_ENCODE_RUNS, percentEncodeUtf8);
}

function percentEncodeUtf8(run: string): string {
  let out = '';
  // toWellFormed-like: a lone surrogate becomes U+FFFD instead of throwing.
  for (const byte of Buffer.from(run, 'utf8')) out += `%${byte < 16 ? '0' : ''}${byte.toString(16).toUpperCase()}`;
  return out;
}
