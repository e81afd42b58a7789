/**
 * The errors txbox throws. Each has a stable `code` to match on and keeps the
 * underlying error as `cause`. Expected outcomes (a failed publish, a missing
 * row) are return values, not exceptions.
 */

export type TxboxErrorCode =
  | 'TXBOX_CONFIG'
  | 'TXBOX_INVALID_EVENT'
  | 'TXBOX_PAYLOAD_TOO_LARGE'
  | 'TXBOX_UNKNOWN_DESTINATION'
  | 'TXBOX_TRANSPORT'
  | 'TXBOX_SCHEMA'
  | 'TXBOX_ABORTED'
  | 'TXBOX_NOT_IN_TRANSACTION'
  | 'TXBOX_ROLLED_BACK'
  | 'TXBOX_HANDLER_TIMEOUT'
  | 'TXBOX_QUERY_TIMEOUT';
import { thrownText } from './error-text.ts';

export class TxboxError extends Error {
  readonly code: TxboxErrorCode;
  constructor(code: TxboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** Invalid options or configuration. `field` names the setting to fix. */
export class ConfigError extends TxboxError {
  readonly field: string;
  /** `shown` replaces `field` at the head of the message, e.g. `--older-than 7` for the flag with its value. */
  constructor(field: string, message: string, options?: { cause?: unknown; shown?: string }) {
    super('TXBOX_CONFIG', `${options?.shown ?? field}: ${message}`, options);
    this.field = field;
  }
}

/** An event given to `enqueue` that cannot be stored. Thrown before any SQL is sent. */
export class InvalidEventError extends TxboxError {
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown; code?: TxboxErrorCode }) {
    super(options?.code ?? 'TXBOX_INVALID_EVENT', `${field}: ${message}`, options);
    this.field = field;
  }
}

/** The serialized payload is larger than `maxPayloadBytes`. */
export class PayloadTooLargeError extends InvalidEventError {
  readonly bytes: number;
  readonly limit: number;
  constructor(field: string, bytes: number, limit: number, what: 'payload' | 'headers' = 'payload') {
    super(
      field,
      what === 'payload'
        ? `serialized payload is ${bytes} bytes, over the limit of ${limit} bytes; store large data elsewhere and put a reference in the event, or raise maxPayloadBytes`
        : `the payload and headers together are ${bytes} bytes, over the limit of ${limit} bytes (headers count toward maxPayloadBytes); keep headers small (trace ids, content type) and put data in the payload, or raise maxPayloadBytes`,
      { code: 'TXBOX_PAYLOAD_TOO_LARGE' },
    );
    this.bytes = bytes;
    this.limit = limit;
  }
}

/** The event names a destination that the outbox was not configured with. */
export class UnknownDestinationError extends InvalidEventError {
  constructor(field: string, destination: string, known: readonly string[]) {
    super(
      field,
      `unknown destination ${JSON.stringify(destination)}; known destinations: ${known.map((d) => JSON.stringify(d)).join(', ') || '(none)'}. Add it to the outbox's destinations or fix the event definition`,
      { code: 'TXBOX_UNKNOWN_DESTINATION' },
    );
  }
}

/** The database schema is missing or older than this version of txbox expects. */
export class SchemaError extends TxboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('TXBOX_SCHEMA', message, options);
  }
}

export type TransportErrorKind = 'retriable' | 'permanent' | 'destination-down';

/**
 * A failed publish. `retriable` errors (timeouts, 5xx, 429) are retried with
 * backoff; `permanent` ones (oversize, unroutable, 4xx) park the event at
 * once; `destination-down` ones (HTTP 401/403/404, connection refused, DNS
 * failure, a broker refusing the credentials) say the whole destination is
 * unusable, not this event: the relay pauses the destination (its circuit
 * breaker) without counting an attempt, and the event stays pending in order.
 */
export class TransportError extends TxboxError {
  readonly kind: TransportErrorKind;
  /** A delay the broker asked for (HTTP Retry-After), in milliseconds. */
  readonly retryAfterMs: number | undefined;
  constructor(kind: TransportErrorKind, message: string, options?: { cause?: unknown; retryAfterMs?: number }) {
    super('TXBOX_TRANSPORT', message, options);
    this.kind = kind;
    this.retryAfterMs = options?.retryAfterMs;
  }
  get retriable(): boolean {
    return this.kind === 'retriable';
  }
}

/**
 * `enqueue` was given something that is not an open transaction (a pool, a
 * client before BEGIN, a database object). Thrown before any SQL is sent.
 * Create the outbox with `allowAutocommit: true` to write outside a transaction on purpose.
 */
export class NotInTransactionError extends TxboxError {
  readonly field = 'tx';
  constructor(message: string) {
    super('TXBOX_NOT_IN_TRANSACTION', `tx: ${message}`);
  }
}

/**
 * A transaction txbox ran was rolled back at COMMIT: a statement in it failed
 * and the error was caught, which leaves a PostgreSQL transaction aborted, and
 * COMMIT then rolls back without an error. Nothing of the transaction is
 * committed. Let a failed statement throw, or use a savepoint around it.
 */
export class TransactionRolledBackError extends TxboxError {
  constructor(
    message = 'the transaction was rolled back at COMMIT: a statement in it failed and its error was caught (PostgreSQL then answers COMMIT with ROLLBACK); nothing of it was committed. Let the error propagate, or wrap the statement in a SAVEPOINT to go on after it',
  ) {
    super('TXBOX_ROLLED_BACK', message);
  }
}

/**
 * An inbox handler did not finish within `handlerTimeoutMs`: its attempt
 * failed, and its transaction was abandoned with its connection discarded
 * (the handler, still running, can no longer write through it).
 */
export class HandlerTimeoutError extends TxboxError {
  readonly timeoutMs: number;
  constructor(timeoutMs: number) {
    super('TXBOX_HANDLER_TIMEOUT', `the handler did not finish within ${timeoutMs} ms (handlerTimeoutMs): its transaction was rolled back and its connection discarded`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * True when a transaction's callback failed because code still running may
 * use its connection (an abandoned inbox handler, possibly wrapped as a
 * batch error's cause): the connection must be destroyed, not pooled again.
 */
export function abandonsConnection(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 3; e = e.cause, depth++) {
    if (e instanceof HandlerTimeoutError) return true;
  }
  return false;
}

/**
 * A statement txbox sent got no answer within its bound (e.g. the relay
 * store's `statementTimeoutMs`): the server or the network went silent. Its
 * connection was dropped. An outage, not a verdict on the data: retried.
 */
export class QueryTimeoutError extends TxboxError {
  readonly timeoutMs: number;
  constructor(timeoutMs: number) {
    super('TXBOX_QUERY_TIMEOUT', `the database did not answer within ${timeoutMs} ms; the connection was dropped`);
    this.timeoutMs = timeoutMs;
  }
}

export class AbortedError extends TxboxError {
  constructor(message = 'operation aborted') {
    super('TXBOX_ABORTED', message);
  }
}

/** Turns anything thrown into a TransportError; unknown errors count as retriable. */
export function toTransportError(err: unknown): TransportError {
  if (err instanceof TransportError) return err;
  const message = thrownText(err);
  return new TransportError('retriable', message, { cause: err });
}
