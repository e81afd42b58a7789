/**
 * How nats.js errors become publish outcomes and start() errors. Errors are
 * matched by `name` along the `cause` chain, not by `instanceof`, so that two
 * copies of the nats.js packages in one install classify alike. Messages name
 * the destination, the subject (without the key token: keys may be personal
 * data) and the setting to fix; never a payload or a credential.
 */
import { ConfigError, TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import type { NatsCredentialSetting } from './nats-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

export function fail(kind: TransportErrorKind, message: string, cause?: unknown): PublishOutcome {
  return { ok: false, error: new TransportError(kind, message, cause === undefined ? undefined : { cause }) };
}

/** JetStream API error codes (`err_code`) that decide an outcome. */
export const JS_ERR = {
  streamNotFound: 10059,
  expectedStreamMismatch: 10060,
  messageTooLargeForStream: 10054,
  notEnabledForAccount: 10039,
} as const;

/** What a failed publish is about, for its message. */
export interface PublishFailureContext {
  readonly destination: string;
  /** The subject without the key token. */
  readonly subject: string;
  readonly keyInSubject: boolean;
  readonly stream: string | null;
  readonly timeoutMs: number;
  readonly credentials: NatsCredentialSetting;
}

export interface ClassifiedFailure {
  readonly error: TransportError;
  /**
   * True when the failure may mean that no stream captures the subject (no
   * responders, no ack in time, or an answer that is not a JetStream ack):
   * the transport then asks JetStream which stream captures it, and only a
   * definite "none" turns the failure into a permanent "unroutable".
   */
  readonly checkRoute: boolean;
  /** What the publish got, in a few words, when `checkRoute` is true. */
  readonly symptom?: string;
}

/** The first error named `name` in the cause chain of `err`. */
export function findError(err: unknown, ...names: string[]): (Error & Record<string, unknown>) | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (names.includes(e.name)) return e as Error & Record<string, unknown>;
  }
  return undefined;
}

/** The JetStream API error (`{ code, err_code, description }`) in the cause chain, if any. */
export function apiErrorOf(err: unknown): { readonly status: number; readonly errCode: number; readonly description: string } | undefined {
  const e = findError(err, 'JetStreamApiError', 'StreamNotFoundError', 'ConsumerNotFoundError');
  if (!e || typeof e.apiError !== 'function') return undefined;
  const api = (e.apiError as () => { code?: number; err_code?: number; description?: string })();
  return { status: api.code ?? 0, errCode: api.err_code ?? 0, description: api.description ?? e.message };
}

function where(c: PublishFailureContext): string {
  return `subject ${c.subject}${c.keyInSubject ? '.<key>' : ''} (destination ${JSON.stringify(c.destination)})`;
}

function credentialHint(c: NatsCredentialSetting): string {
  return c === null ? 'the credentials (user/pass, token or authenticator)' : c === 'servers' ? 'the credentials in servers' : c;
}

/** Classifies the failure of a JetStream publish: a nats.js error, or an `AckFailure` (nats-acks.ts) named like one. */
export function classifyPublishError(err: unknown, c: PublishFailureContext): ClassifiedFailure {
  const retriable = (message: string, symptom?: string): ClassifiedFailure =>
    symptom === undefined
      ? { error: new TransportError('retriable', message, { cause: err }), checkRoute: false }
      : { error: new TransportError('retriable', message, { cause: err }), checkRoute: true, symptom };
  const permanent = (message: string): ClassifiedFailure => ({ error: new TransportError('permanent', message, { cause: err }), checkRoute: false });
  // Credentials, permissions and a connection that is down concern every event of the destination: the relay pauses it.
  const down = (message: string): ClassifiedFailure => ({ error: new TransportError('destination-down', message, { cause: err }), checkRoute: false });

  if (findError(err, 'NoResponders')) {
    return retriable(`no responders for ${where(c)}: no stream answered; JetStream may be restarting or electing a leader`, 'no responders');
  }
  if (findError(err, 'TimeoutError')) {
    // No answer at all: the server (or the path to it) is silent, or JetStream is electing a leader; nothing about
    // the message. Destination-down (paused, no attempts spent), unless the route check finds no stream at all.
    const message = `no JetStream ack for ${where(c)} within ${c.timeoutMs} ms (publishTimeoutMs); the server may be down, unreachable, reconnecting or electing a leader`;
    return { error: new TransportError('destination-down', message, { cause: err }), checkRoute: true, symptom: `no ack within ${c.timeoutMs} ms` };
  }
  const permission = findError(err, 'PermissionViolationError');
  if (permission) {
    return down(`permission denied: the NATS user may not publish to ${where(c)}; grant it publish permission on this subject, or check ${credentialHint(c.credentials)}`);
  }
  if (findError(err, 'AuthorizationError', 'UserAuthenticationExpiredError')) {
    return down(`authorization failed while publishing to ${where(c)}; check ${credentialHint(c.credentials)}`);
  }
  if (findError(err, 'ConnectionError')) {
    return down(`the NATS connection is down or reconnecting; ${where(c)} was not published (${messageOf(err)})`);
  }
  if (findError(err, 'ClosedConnectionError', 'DrainingConnectionError')) {
    return retriable(`the NATS connection is closed or reconnecting; ${where(c)} was not published (${messageOf(err)})`);
  }
  const invalidArgument = findError(err, 'InvalidArgumentError');
  if (invalidArgument && /max_payload/i.test(invalidArgument.message)) {
    return permanent(`message too large for ${where(c)}: it exceeds the server's max_payload; store large data elsewhere and put a reference in the event, or raise max_payload on every server`);
  }
  if (invalidArgument || findError(err, 'InvalidSubjectError')) {
    return permanent(`nats.js refused the message for ${where(c)}: ${messageOf(err)}`);
  }
  const api = apiErrorOf(err);
  if (api) {
    const detail = `${api.description} (err_code ${api.errCode})`;
    if (api.errCode === JS_ERR.expectedStreamMismatch) {
      return permanent(`wrong stream: ${where(c)} is captured by a stream other than the expected ${JSON.stringify(c.stream)}; fix streams.${c.destination} or the streams' subjects`);
    }
    if (api.errCode === JS_ERR.messageTooLargeForStream) {
      return permanent(`message too large for ${where(c)}: ${detail}; the stream's max_msg_size is lower than this message`);
    }
    if (api.status >= 500 || api.status === 0) return retriable(`JetStream is temporarily unavailable for ${where(c)}: ${detail}`);
    return permanent(`JetStream refused the message for ${where(c)}: ${detail}`);
  }
  if (err instanceof SyntaxError || findError(err, 'JetStreamError')) {
    // Something answered that is not a JetStream ack: a plain subscriber with a reply, not a stream.
    return retriable(`the answer for ${where(c)} was not a JetStream ack (${messageOf(err)})`, 'an answer that is not a JetStream ack');
  }
  return retriable(`publish to ${where(c)} failed: ${messageOf(err)}`);
}

/** The permanent outcome once JetStream said that no stream captures the subject. */
export function unroutable(c: PublishFailureContext, seen: ClassifiedFailure): TransportError {
  const capture = c.keyInSubject ? `${c.subject}.>` : c.subject;
  return new TransportError(
    'permanent',
    `unroutable: no JetStream stream captures ${where(c)}; add ${capture} to a stream's subjects, or fix subjects.${c.destination} / subjectPrefix (the publish got ${seen.symptom ?? 'no ack'})`,
    { cause: seen.error },
  );
}

/** Why connect() failed, as the setting to fix. */
export function connectFailure(err: unknown, servers: string, credentials: NatsCredentialSetting, timeoutMs: number): ConfigError {
  if (findError(err, 'AuthorizationError', 'UserAuthenticationExpiredError')) {
    if (credentials === null) {
      return new ConfigError('user/pass', `the NATS server at ${servers} requires credentials (Authorization Violation); set user/pass, token or authenticator`, { cause: err });
    }
    return new ConfigError(credentials, `the NATS server at ${servers} refused these credentials (Authorization Violation); check ${credentials}`, { cause: err });
  }
  const timedOut = findError(err, 'TimeoutError') !== undefined;
  const reason = timedOut ? `no answer within ${timeoutMs} ms (connectTimeoutMs)` : messageOf(err);
  return new ConfigError('servers', `cannot connect to NATS at ${servers}: ${reason}; check servers and that nats-server is running and reachable`, { cause: err });
}

/** Why the JetStream check of start() failed. */
export function jetStreamCheckFailure(err: unknown, servers: string, credentials: NatsCredentialSetting, timeoutMs: number): ConfigError | TransportError {
  if (findError(err, 'PermissionViolationError')) {
    return new ConfigError(
      credentials ?? 'user/pass',
      `the NATS user may not use the JetStream API at ${servers} ($JS.API.INFO); grant publish permission on $JS.API.> (and subscribe on _INBOX.>)`,
      { cause: err },
    );
  }
  const api = apiErrorOf(err);
  if (api?.errCode === JS_ERR.notEnabledForAccount) {
    return new ConfigError(credentials ?? 'servers', `JetStream is not enabled for this account at ${servers}; enable it for the account in the server configuration`, { cause: err });
  }
  if (findError(err, 'NoResponders', 'JetStreamNotEnabled')) {
    return new ConfigError('servers', `JetStream is not enabled at ${servers} (nothing answers $JS.API.INFO); start nats-server with -js or a jetstream {} block`, { cause: err });
  }
  if (findError(err, 'TimeoutError')) {
    return new TransportError('retriable', `JetStream at ${servers} did not answer $JS.API.INFO within ${timeoutMs} ms (publishTimeoutMs); it may be starting or electing a leader`, { cause: err });
  }
  return new TransportError('retriable', `the JetStream check at ${servers} failed: ${messageOf(err)}`, { cause: err });
}

/** An error's message with any `scheme://user:pass@` userinfo removed. */
export function messageOf(err: unknown): string {
  const message = thrownText(err);
  return message.replace(/\/\/[^@\s/]*@/g, '//');
}
