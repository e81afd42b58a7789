/**
 * How Redis errors become publish outcomes and start-up errors. Messages name
 * the stream, the destination, the redacted address and the server's error;
 * never the command's arguments (payloads, passwords), which ioredis attaches
 * to its errors as `command.args` and which therefore never become a `cause`.
 */
import { ConfigError, TransportError, type TransportErrorKind, type TxboxError } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { thrownText } from '../../core/error-text.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

/** Delays the server's state asks for: memory full or disk failing need minutes of operator work, not milliseconds. */
const FULL_RETRY_AFTER_MS = 5000;
const LOADING_RETRY_AFTER_MS = 1000;

interface ReplyRule {
  readonly kind: TransportErrorKind;
  readonly why: string;
  readonly retryAfterMs?: number;
}

/** Reply-error prefixes (the server's first word) and what they mean for an XADD. */
const REPLY_RULES: Readonly<Record<string, ReplyRule>> = {
  WRONGTYPE: { kind: 'permanent', why: 'the key holds another data type, not a stream (unroutable); delete or rename that key, or map the destination to another key in streams' },
  OOM: { kind: 'retriable', why: 'Redis is at maxmemory and refuses writes; free memory, trim streams (maxLen) or raise maxmemory', retryAfterMs: FULL_RETRY_AFTER_MS },
  MISCONF: { kind: 'retriable', why: 'Redis refuses writes because saving to disk failed (stop-writes-on-bgsave-error)', retryAfterMs: FULL_RETRY_AFTER_MS },
  LOADING: { kind: 'retriable', why: 'Redis is loading its data set after a restart', retryAfterMs: LOADING_RETRY_AFTER_MS },
  BUSY: { kind: 'retriable', why: 'Redis is busy running a script or function', retryAfterMs: LOADING_RETRY_AFTER_MS },
  TRYAGAIN: { kind: 'retriable', why: 'the key is being migrated between cluster nodes' },
  CLUSTERDOWN: { kind: 'retriable', why: 'the cluster is down', retryAfterMs: LOADING_RETRY_AFTER_MS },
  READONLY: { kind: 'retriable', why: 'the server is a read-only replica (a failover?); the transport reconnects, point url at the primary or at Sentinel-managed DNS' },
  MASTERDOWN: { kind: 'retriable', why: 'the replica lost its primary' },
  NOREPLICAS: { kind: 'retriable', why: 'not enough replicas acknowledge writes (min-replicas-to-write)' },
  MOVED: { kind: 'retriable', why: 'the key lives on another cluster node; Redis Cluster is not supported yet, point url at a standalone primary' },
  ASK: { kind: 'retriable', why: 'the key lives on another cluster node; Redis Cluster is not supported yet, point url at a standalone primary' },
  // Credentials and permissions concern every event of the destination: destination-down (the relay pauses it, nothing parks).
  NOAUTH: { kind: 'destination-down', why: 'the server now requires a password; set it in url or password and restart the relay' },
  WRONGPASS: { kind: 'destination-down', why: 'the server no longer accepts the credentials; fix url, username or password and restart the relay' },
  NOPERM: { kind: 'destination-down', why: 'the ACL user may not XADD to this key; grant it +xadd on the stream keys' },
};

/** Where one XADD went, for messages. */
export interface XaddTarget {
  readonly stream: string;
  readonly destination: string;
  /** The redacted address. */
  readonly address: string;
}

/** Classifies the failure of one XADD (a reply error, or the connection failing under it). */
export function xaddFailure(err: unknown, target: XaddTarget): TransportError {
  const head = describe(target);
  const message = errorMessage(err);
  const code = replyCode(err);
  if (code !== null) {
    const rule = REPLY_RULES[code];
    if (rule) return transportError(rule.kind, `${head} failed with ${code}: ${rule.why} (${message})`, err, rule.retryAfterMs);
    if (/invalid bulk length|too large|exceeds/i.test(message)) {
      return transportError('permanent', `${head} failed: the entry is too large for the server's proto-max-bulk-len; lower maxMessageBytes (${message})`, err);
    }
    return transportError('retriable', `${head} failed: ${message}`, err);
  }
  return transportError(isUnreachable(err) ? 'destination-down' : 'retriable', `${head} failed: ${connectionProblem(err)}`, err);
}

/** Network codes that mean nothing answers at the address: refused, unknown host, DNS unavailable. */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * Redis is out of reach for every command, not just this one: the address
 * refuses or does not resolve, the client is offline and reconnecting
 * (with the offline queue off, a command sent then fails at once), or the
 * connection went down under the command (closed, reset: ioredis fails it
 * with "max retries per request"): about the connection, not the event, so
 * a Redis restart or a long outage spends no attempts. A reply error
 * (classified above) is never this.
 */
function isUnreachable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (UNREACHABLE_CODES.has(code) || code === 'ECONNRESET' || code === 'EPIPE')) return true;
  if ((err as { name?: unknown } | null)?.name === 'MaxRetriesPerRequestError') return true;
  return /isn't writeable|Connection is closed/.test(errorMessage(err));
}

/**
 * No reply to a pipeline of XADDs within `commandTimeoutMs`: nothing about
 * the events makes Redis that slow (their size is bounded by
 * maxMessageBytes), so Redis, or the network to it, is not answering:
 * `destination-down`, which pauses the destination without spending the
 * events' attempts (a long silence would otherwise park every key's head).
 */
export function timeoutFailure(target: XaddTarget, timeoutMs: number): TransportError {
  return new TransportError('destination-down', `${describe(target)} got no reply within ${timeoutMs} ms (commandTimeoutMs): Redis or the network to it is not answering; the entry may still have been added`);
}

export function abortedFailure(target: XaddTarget): TransportError {
  return new TransportError('retriable', `${describe(target)} was cancelled by the caller's signal before a reply; the entry may still have been added`);
}

function describe(target: XaddTarget): string {
  return `XADD to stream ${JSON.stringify(target.stream)} (destination ${JSON.stringify(target.destination)}) at ${target.address}`;
}

/** What went wrong with the connection, in one line: `ECONNREFUSED (connect ECONNREFUSED 127.0.0.1:1)`. */
export function connectionProblem(err: unknown): string {
  const e = err as { code?: unknown; name?: unknown } | null;
  const message = errorMessage(err);
  if (typeof e?.code === 'string' && !message.includes(e.code)) return `${e.code} (${message})`;
  if (e?.name === 'MaxRetriesPerRequestError' || /Connection is closed|isn't writeable/.test(message)) return `the connection is down, ioredis is reconnecting (${message})`;
  return message;
}

/** What start() reports when connecting or checking fails: which setting to fix, without credentials. */
export interface StartContext {
  readonly address: string;
  /** The setting that holds the address: `url` or `client`. */
  readonly addressField: string;
  readonly userField: string;
  readonly passwordField: string;
  readonly username: string | undefined;
}

/** Turns a failure of connect/PING at start into an error naming the setting to fix. */
export function startFailure(err: unknown, ctx: StartContext): TxboxError {
  const message = errorMessage(err);
  const code = replyCode(err);
  const user = ctx.username === undefined ? 'the default user' : `user ${JSON.stringify(ctx.username)}`;
  if (code === 'WRONGPASS' || /invalid username-password pair/i.test(message)) {
    const field = ctx.username !== undefined ? ctx.userField : ctx.passwordField;
    return new ConfigError(field, `Redis at ${ctx.address} refused the credentials of ${user} (WRONGPASS): the user does not exist or is disabled, or the password is wrong; fix ${ctx.userField === ctx.passwordField ? ctx.userField : `${ctx.userField} and ${ctx.passwordField}`}`, { cause: safeCause(err) });
  }
  if (code === 'NOAUTH') {
    return new ConfigError(ctx.passwordField, `Redis at ${ctx.address} requires a password: put it in url ("redis://:<password>@host:6379") or set password`, { cause: safeCause(err) });
  }
  if (code === 'NOPERM') {
    return new ConfigError(ctx.userField, `${user} lacks permissions at ${ctx.address}; it needs at least +ping and +xadd on the stream keys (${message})`, { cause: safeCause(err) });
  }
  const netCode = (err as { code?: unknown } | null)?.code;
  if (typeof netCode === 'string' && /CERT|TLS|SSL|SELF_SIGNED|UNABLE_TO_VERIFY|HOSTNAME/.test(netCode)) {
    return new ConfigError('tls', `the TLS handshake with ${ctx.address} failed: ${netCode}; check tls (ca, servername) and the url's scheme`, { cause: safeCause(err) });
  }
  const tlsHint = ctx.address.startsWith('rediss:') ? ' (TLS is on: does the server listen for TLS on that port?)' : '';
  return new ConfigError(ctx.addressField, `cannot reach Redis at ${ctx.address}: ${connectionProblem(err)}; check the host and port in ${ctx.addressField} and that Redis is running${tlsHint}`, { cause: safeCause(err) });
}

/** The password was given but the server's default user needs none: the url likely points at the wrong server. */
export function passwordNotNeeded(ctx: StartContext): ConfigError {
  return new ConfigError(
    ctx.passwordField,
    `a password is configured but Redis at ${ctx.address} has none for the default user; check that url points at the intended server, or remove the password`,
  );
}

/** The first word of a Redis reply error (`WRONGTYPE`, `OOM`, `ERR`), or null when `err` is not a reply error. */
export function replyCode(err: unknown): string | null {
  const e = err as { name?: unknown } | null;
  if (e?.name !== 'ReplyError') return null;
  const match = /^([A-Z][A-Z0-9_-]*)\b/.exec(errorMessage(err));
  return match ? match[1]! : null;
}

/** A copy of an error with its name, message and network code, and nothing that could hold arguments. */
export function safeCause(err: unknown): Error {
  const copy = new Error(errorMessage(err));
  const e = err as { name?: unknown; code?: unknown } | null;
  if (typeof e?.name === 'string') copy.name = e.name;
  if (typeof e?.code === 'string' || typeof e?.code === 'number') Object.assign(copy, { code: e.code });
  return copy;
}

function transportError(kind: TransportErrorKind, message: string, err: unknown, retryAfterMs?: number): TransportError {
  return new TransportError(kind, message, retryAfterMs === undefined ? { cause: safeCause(err) } : { cause: safeCause(err), retryAfterMs });
}

function errorMessage(err: unknown): string {
  return thrownText(err);
}
