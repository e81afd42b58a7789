/**
 * Standard Webhooks (https://www.standardwebhooks.com) symmetric signatures:
 * `webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`.
 * Used by HttpTransport to sign and by the webhook receiver (and the inbox
 * consumer) to verify.
 */
import { createHmac, createSecretKey, KeyObject, randomBytes, timingSafeEqual } from 'node:crypto';
import { ConfigError } from '../../core/errors.ts';

/**
 * A signing secret: `whsec_<base64>` (the Standard Webhooks format, the bytes
 * after the prefix base64-decoded), any other string (its UTF-8 bytes, as is;
 * NOT base64-decoded), raw key bytes, or a KeyObject made by `webhookKey()`.
 */
export type WebhookSecret = string | Uint8Array | KeyObject;

const PREFIX = 'whsec_';
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
/** Shorter keys are refused: the spec asks for 24 to 64 random bytes. */
export const MIN_WEBHOOK_SECRET_BYTES = 16;
const DIGEST_BYTES = 32;

/**
 * Turns a secret into a KeyObject once, so that each signature need not parse
 * it again. Throws ConfigError naming `field` when the secret is malformed or
 * too short.
 *
 * @example
 * const key = webhookKey('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
 */
export function webhookKey(secret: WebhookSecret, field = 'secret'): KeyObject {
  if (secret instanceof KeyObject) {
    if (secret.type !== 'secret') throw new ConfigError(field, 'must be a secret KeyObject (createSecretKey), not an asymmetric key');
    return secret;
  }
  let bytes: Buffer;
  if (typeof secret === 'string') {
    if (secret.startsWith(PREFIX)) {
      const b64 = secret.slice(PREFIX.length);
      if (!BASE64.test(b64)) {
        throw new ConfigError(field, 'the part after "whsec_" must be standard base64 (A-Z a-z 0-9 + /); copy the secret exactly as the receiver issued it');
      }
      bytes = Buffer.from(b64, 'base64');
    } else {
      bytes = Buffer.from(secret, 'utf8');
    }
  } else if (secret instanceof Uint8Array) {
    bytes = Buffer.from(secret);
  } else {
    throw new ConfigError(field, 'must be a "whsec_<base64>" string, a string, a Uint8Array or a KeyObject');
  }
  if (bytes.length < MIN_WEBHOOK_SECRET_BYTES) {
    throw new ConfigError(
      field,
      `is ${bytes.length} bytes long; use at least ${MIN_WEBHOOK_SECRET_BYTES} random bytes, e.g. generateWebhookSecret() for a "whsec_..." secret`,
    );
  }
  return createSecretKey(bytes);
}

/**
 * The error for a sender or receiver given no secret without `allowUnsigned:
 * true`: an unset environment variable must not silently turn signing (or
 * verification) off.
 */
export function missingSecretError(side: 'sender' | 'receiver'): ConfigError {
  const effect = side === 'sender' ? 'requests would go out unsigned' : 'forged, unsigned requests would be accepted';
  return new ConfigError(
    'secret',
    `is missing (undefined), so ${effect}; generate one with \`npx txbox secret\` (or generateWebhookSecret()), share it between sender and receiver and pass it as secret (the CLI reads TXBOX_WEBHOOK_SECRET), or set allowUnsigned: true to go unsigned on purpose (tests, trusted networks only)`,
  );
}

/**
 * A new random secret in the Standard Webhooks format (24 bytes), to share
 * between the sender and the receiver.
 *
 * @example
 * generateWebhookSecret() // 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD'
 */
export function generateWebhookSecret(bytes = 24): string {
  return PREFIX + randomBytes(bytes).toString('base64');
}

/**
 * The `webhook-signature` value (`v1,<base64>`) for one message.
 * `timestamp` is in Unix seconds; `body` is the exact bytes sent.
 *
 * @example
 * signWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')
 * // 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='
 */
export function signWebhook(secret: WebhookSecret, id: string, timestamp: number | string, body: string | Uint8Array): string {
  return `v1,${digest(webhookKey(secret), id, timestamp, body).toString('base64')}`;
}

function digest(key: KeyObject, id: string, timestamp: number | string, body: string | Uint8Array): Buffer {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

export interface VerifyWebhookOptions {
  /** The shared secret, or several during a key rotation (any may match). */
  readonly secret: WebhookSecret | readonly WebhookSecret[];
  /** The request headers with lower-case names, e.g. Node's `req.headers`. */
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  /** The raw body bytes exactly as received (verify before parsing). */
  readonly body: string | Uint8Array;
  /** How far `webhook-timestamp` may be from now, either way, in seconds. Default: 300. */
  readonly toleranceSeconds?: number;
  /** The current time in Unix seconds. Default: the system clock. */
  readonly nowSeconds?: number;
}

export type WebhookVerification =
  | { readonly ok: true; readonly id: string; readonly timestamp: number }
  | {
      readonly ok: false;
      readonly reason: 'missing-headers' | 'invalid-timestamp' | 'stale-timestamp' | 'invalid-signature';
      /** A short explanation that is safe to log or answer with (no secret, no body). */
      readonly message: string;
    };

/**
 * Verifies a Standard Webhooks signature and timestamp window. The result is
 * a value, not an exception: `ok: false` says why (answer 401). Signatures are
 * compared in constant time; `webhook-signature` may list several
 * space-separated signatures (the sender's key rotation), any valid `v1` passes.
 *
 * @example
 * const result = verifyWebhook({ secret, headers: req.headers, body: rawBody });
 * if (!result.ok) return res.writeHead(401).end(result.message);
 */
export function verifyWebhook(options: VerifyWebhookOptions): WebhookVerification {
  const h = checkWebhookHeaders(options.headers, options.toleranceSeconds, options.nowSeconds);
  if (!h.ok) return h;
  const { id, ts, timestamp, signatures } = h;
  const secrets = Array.isArray(options.secret) ? (options.secret as readonly WebhookSecret[]) : [options.secret as WebhookSecret];
  const expected = secrets.map((s) => digest(webhookKey(s), id, ts, options.body));
  for (const candidate of signatures.split(' ')) {
    const comma = candidate.indexOf(',');
    if (comma < 0 || candidate.slice(0, comma) !== 'v1') continue;
    const given = Buffer.from(candidate.slice(comma + 1), 'base64');
    if (given.length !== DIGEST_BYTES) continue;
    if (expected.some((e) => timingSafeEqual(e, given))) return { ok: true, id, timestamp };
  }
  return { ok: false, reason: 'invalid-signature', message: 'no valid v1 signature in webhook-signature' };
}

/**
 * The checks of `verifyWebhook` that need no body: the three headers present
 * and the timestamp within the tolerance. A receiver runs them before it
 * reads a body, so that requests that cannot be valid are refused without
 * buffering anything.
 */
export function checkWebhookHeaders(
  headers: VerifyWebhookOptions['headers'],
  toleranceSeconds = 300,
  nowSeconds?: number,
): Exclude<WebhookVerification, { ok: true }> | { ok: true; id: string; ts: string; timestamp: number; signatures: string } {
  const id = single(headers['webhook-id']);
  const ts = single(headers['webhook-timestamp']);
  const signatures = single(headers['webhook-signature']);
  if (!id || !ts || !signatures) {
    return { ok: false, reason: 'missing-headers', message: 'missing webhook-id, webhook-timestamp or webhook-signature header' };
  }
  if (!/^\d{1,12}$/.test(ts)) return { ok: false, reason: 'invalid-timestamp', message: 'webhook-timestamp is not Unix seconds' };
  const timestamp = Number(ts);
  const now = nowSeconds ?? Math.floor(Date.now() / 1000);
  // NaN (Number(process.env.UNSET)) would compare false below and skip the check: captured requests replayable for ever.
  if (!Number.isFinite(toleranceSeconds) || toleranceSeconds < 0) throw new ConfigError('toleranceSeconds', `must be a number of seconds >= 0, got ${String(toleranceSeconds)}`);
  if (!Number.isFinite(now)) throw new ConfigError('nowSeconds', `must be Unix seconds, got ${String(now)}`);
  if (!(Math.abs(now - timestamp) <= toleranceSeconds)) {
    return { ok: false, reason: 'stale-timestamp', message: `webhook-timestamp is more than ${toleranceSeconds} s away from the receiver's clock` };
  }
  return { ok: true, id, ts, timestamp, signatures };
}

function single(value: string | readonly string[] | undefined): string | undefined {
  return typeof value === 'string' ? value : value?.[0];
}
