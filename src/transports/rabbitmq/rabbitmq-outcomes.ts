/**
 * How RabbitMQ's answers (or their absence) become PublishOutcomes and
 * start-up errors. Messages name the exchange, routing key, destination and
 * the setting to fix; never the password, the payload or the query string.
 */
import { ConfigError, TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { thrownText } from '../../core/error-text.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

/** AMQP reply codes RabbitMQ closes a channel or connection with. */
export const REPLY = Object.freeze({
  NO_ROUTE: 312,
  CONNECTION_FORCED: 320,
  ACCESS_REFUSED: 403,
  NOT_FOUND: 404,
  PRECONDITION_FAILED: 406,
  NOT_ALLOWED: 530,
});

/** `amqp://user:pass@host:5672/vhost?heartbeat=5` -> `amqp://host:5672/vhost`: safe for errors and logs. */
export function redactAmqpUrl(url: URL): string {
  const port = url.port || (url.protocol === 'amqps:' ? '5671' : '5672');
  return `${url.protocol}//${url.hostname.includes(':') && !url.hostname.startsWith('[') ? `[${url.hostname}]` : url.hostname}:${port}${url.pathname || '/'}`;
}

export function fail(kind: TransportErrorKind, message: string, cause?: unknown): PublishOutcome {
  return { ok: false, error: new TransportError(kind, message, cause === undefined ? undefined : { cause }) };
}

/** Where a message was sent, for messages about it. */
export interface Target {
  readonly destination: string;
  readonly exchange: string;
  readonly routingKey: string;
}

export function describeTarget(t: Target): string {
  return `exchange ${quote(t.exchange)} routing key ${JSON.stringify(t.routingKey)} (destination ${JSON.stringify(t.destination)})`;
}

/** The setting that chooses a destination's exchange. */
export function exchangeSetting(destination: string, listed: boolean): string {
  return listed ? `destinations.${destination}.exchange` : 'exchange';
}

export function quote(exchange: string): string {
  return exchange === '' ? '"" (the default exchange)' : JSON.stringify(exchange);
}

/** basic.return with NO_ROUTE: mandatory and nothing bound for the routing key. */
export function unroutable(t: Target, replyCode: number, replyText: string, setting: string): PublishOutcome {
  const fix =
    t.exchange === ''
      ? `declare a queue named ${JSON.stringify(t.routingKey)}, or route the destination to an exchange with ${setting}`
      : `bind a queue to it for this routing key, or fix ${setting} / the routing key`;
  return fail('permanent', `unroutable: RabbitMQ returned the message (${replyCode} ${replyText}): nothing is bound to ${describeTarget(t)}; ${fix}`);
}

/** The body is larger than what may be sent. */
export function tooLarge(t: Target, bytes: number, limit: number, source: string): PublishOutcome {
  return fail(
    'permanent',
    `message too large: the body is ${bytes} bytes, over the limit of ${limit} bytes (${source}) for ${describeTarget(t)}; store large data elsewhere and put a reference in the event`,
  );
}

export function nacked(t: Target): PublishOutcome {
  return fail(
    'retriable',
    `RabbitMQ nacked the message for ${describeTarget(t)} (an internal broker error, or a queue with overflow=reject-publish is full)`,
  );
}

/** What the broker said when it closed a channel or connection. */
export interface CloseReason {
  readonly code: number;
  readonly text: string;
}

/**
 * Reads an amqplib close error (`Channel closed by server: 404 (NOT-FOUND)
 * with message "NOT_FOUND - no exchange 'x' in vhost '/'"`) into a code and
 * the broker's text. Null when `err` is not such an error.
 */
export function closeReason(err: unknown): CloseReason | null {
  if (!(err instanceof Error)) return null;
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'number') return null;
  const quoted = /with message "(.*)"$/s.exec(err.message);
  return { code, text: quoted ? quoted[1]! : err.message };
}

/** The exchange named in a NOT_FOUND or ACCESS_REFUSED text, e.g. `no exchange 'orders' in vhost '/'`. */
export function exchangeInText(text: string): string | null {
  const m = /exchange '((?:[^']|'')*)'/.exec(text);
  return m ? m[1]! : null;
}

/** The broker's limit in a PRECONDITION_FAILED text: `message size 135266304 is larger than configured max size 134217728`. */
export function maxSizeInText(text: string): number | null {
  const m = /larger than configured max size (\d+)/.exec(text);
  return m ? Number(m[1]) : null;
}

/**
 * The outcome of a message whose channel the broker closed before its
 * confirm. The broker closes the channel on the first faulty message; the
 * others in flight on it are collateral and retriable.
 */
export function channelClosedOutcome(reason: CloseReason | null, t: Target & { readonly bytes: number; readonly setting: string }, lost: string): PublishOutcome {
  if (reason === null) return fail('retriable', `the channel closed before RabbitMQ confirmed the message for ${describeTarget(t)}: ${lost}`);
  const said = `${reason.code} ${reason.text}`;
  if (reason.code === REPLY.NOT_FOUND && exchangeInText(reason.text) === t.exchange) {
    return fail('permanent', `exchange ${quote(t.exchange)} does not exist (${said}); declare it, set assertExchanges, or fix ${t.setting}`);
  }
  if (reason.code === REPLY.ACCESS_REFUSED && exchangeInText(reason.text) === t.exchange) {
    // Every message to this exchange would be refused: destination-down, so the relay pauses it instead of parking every key.
    return fail(
      'destination-down',
      `RabbitMQ refused publishing to exchange ${quote(t.exchange)} (${said}); grant the user in url write permission on it (rabbitmqctl set_permissions), make it non-internal, or fix ${t.setting}`,
    );
  }
  const max = reason.code === REPLY.PRECONDITION_FAILED ? maxSizeInText(reason.text) : null;
  if (max !== null && t.bytes > max) return tooLarge(t, t.bytes, max, "the broker's max_message_size; lower maxMessageBytes to match");
  return fail('retriable', `RabbitMQ closed the channel before confirming the message for ${describeTarget(t)} (${said}); another message in flight on the channel caused it, or the broker is shutting down`);
}

/**
 * A failed connect at `start()`: ConfigError naming `url`, with the broker's
 * reason (refused login, unknown vhost, unreachable host). `display` is the
 * redacted URL; the user name is shown, the password never.
 */
export function connectError(err: unknown, display: string, user: string): ConfigError {
  const e = err as { code?: unknown } | null;
  const message = thrownText(err);
  const errno = typeof e?.code === 'string' ? e.code : null;
  if (errno === null && /ACCESS.REFUSED/.test(message)) {
    return new ConfigError('url', `RabbitMQ at ${display} refused the login of user ${JSON.stringify(user)} (ACCESS_REFUSED); check the user name and password in url`, { cause: err });
  }
  // amqplib reports a refused connection.open (unknown vhost, no access to it) without the broker's text.
  if (errno === null && /NOT.ALLOWED|Expected ConnectionOpenOk; got <ConnectionClose/.test(message)) {
    return new ConfigError('url', `RabbitMQ at ${display} refused to open the virtual host (it does not exist, or user ${JSON.stringify(user)} has no access to it); check the vhost path of url (%2F is "/")`, { cause: err });
  }
  const code = errno ?? (/ETIMEDOUT/.test(message) ? 'ETIMEDOUT' : 'ERROR');
  return new ConfigError('url', `cannot connect to RabbitMQ at ${display} (${code}: ${scrub(message)}); check the host and port of url and that the broker is running`, { cause: err });
}

/** Removes anything that looks like userinfo from a client error message. */
export function scrub(message: string): string {
  return message.replace(/\/\/[^/@\s]*@/g, '//').slice(0, 300);
}
