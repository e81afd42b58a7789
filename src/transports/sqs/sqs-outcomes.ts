/**
 * How SQS and SNS errors become publish outcomes and start-up errors.
 *
 * Two kinds of failure: a whole request fails (the SDK throws: the queue or
 * topic is missing, credentials refused, throttled, the network), or one
 * entry of a batch fails (`Failed[]` with a `Code` and `SenderFault`).
 * Errors are read by `name`/`Code`, `$fault` and the HTTP status, not by
 * `instanceof`, so that a client from another copy of the SDK classifies the
 * same. Messages name the queue or topic and the service's error; never the
 * body or the attributes.
 */
import { ConfigError, TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { brokerOutage, warnOutageAtStart } from '../../core/broker-outage.ts';
import type { PublishOutcome } from '../../core/ports.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

/** What a failed request or entry was about, and what to do. */
export interface AwsFailure {
  readonly kind: TransportErrorKind;
  /** `request`: the batch as a whole; a permanent one is retried entry by entry to find the culprit. */
  readonly scope: 'request' | 'entry';
  /** The option to fix when the failure is one of configuration. */
  readonly setting: 'credentials' | 'endpoint' | null;
  /** `Name: message` from the service or the network. */
  readonly reason: string;
}

/** The queue or topic does not exist (deleted, wrong URL or ARN, wrong region or account). */
const MISSING = /^(QueueDoesNotExist|AWS\.SimpleQueueService\.NonExistentQueue|NonExistentQueue|NotFound|NotFoundException|QueueDeletedRecently|AWS\.SimpleQueueService\.QueueDeletedRecently)$/;
/** Credentials refused or not allowed: every event of the destination fails the same way. */
const DENIED = /^(AccessDenied|AccessDeniedException|AuthorizationError|InvalidClientTokenId|UnrecognizedClientException|SignatureDoesNotMatch|IncompleteSignature|ExpiredToken|ExpiredTokenException|InvalidSecurity|MissingAuthenticationToken|CredentialsProviderError|InvalidAccessKeyId|OptInRequired|RequestExpired)$/;
/** The queue's KMS key is unusable: every event of the queue fails until an operator fixes the key or its policy. */
const KMS_DOWN = /^(KmsAccessDenied|KmsDisabled|KmsInvalidState|KmsNotFound|KmsOptInRequired|KmsInvalidKeyUsage|KMSAccessDenied|KMSDisabled|KMSInvalidState|KMSNotFound|KMSOptInRequired)(Exception)?$/;
/** The service asks to slow down or is unwell. */
const THROTTLED = /^(Throttling|ThrottlingException|ThrottledException|RequestThrottled|RequestThrottledException|TooManyRequestsException|KmsThrottled|KMSThrottling(Exception)?|SlowDown|ServiceUnavailable|InternalError|InternalFailure|InternalErrorException|ServiceUnavailableException|RequestTimeout|RequestTimeoutException|EndpointDisabled)$/;
/** This entry's content is refused: it will be refused again. */
const ENTRY_PERMANENT = /^(InvalidParameterValue|InvalidParameter|InvalidParameterException|InvalidMessageContents|InvalidAttributeName|InvalidAttributeValue|MessageTooLong|MissingParameter|UnsupportedOperation|InvalidBatchEntryId|ValidationError|ValidationException|InvalidParameterValueException)$/;
/** Network codes that mean nothing answers at the address. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

interface ErrorLike {
  readonly name?: unknown;
  readonly Code?: unknown;
  readonly code?: unknown;
  readonly message?: unknown;
  readonly $fault?: unknown;
  readonly $metadata?: { readonly httpStatusCode?: unknown };
}

/** The service's short error name: `QueueDoesNotExist`, `AccessDenied`, ... (`com.amazonaws.sqs#X` is cut to `X`). */
function errorName(e: ErrorLike): string {
  const name = typeof e.name === 'string' && e.name !== 'Error' ? e.name : typeof e.Code === 'string' ? e.Code : 'Error';
  return name.replace(/^.*#/, '');
}

/** Classifies an error thrown by a request (send, publish, get attributes). */
export function classifyRequestError(err: unknown): AwsFailure {
  const e = (err ?? {}) as ErrorLike;
  const name = errorName(e);
  const code = typeof e.code === 'string' ? e.code : typeof (e as { cause?: { code?: unknown } }).cause?.code === 'string' ? ((e as { cause: { code: string } }).cause.code) : '';
  const status = typeof e.$metadata?.httpStatusCode === 'number' ? e.$metadata.httpStatusCode : 0;
  const message = typeof e.message === 'string' ? e.message : String(err);
  const reason = `${name}${code && !message.includes(code) ? ` ${code}` : ''}: ${message}`;
  const f = (kind: TransportErrorKind, setting: AwsFailure['setting'] = null): AwsFailure => ({ kind, scope: 'request', setting, reason });
  if (MISSING.test(name)) return f('destination-down');
  if (DENIED.test(name) || status === 401 || status === 403) return f('destination-down', 'credentials');
  if (KMS_DOWN.test(name)) return f('destination-down');
  if (UNREACHABLE.has(code) || /\b(ECONNREFUSED|ENOTFOUND|EAI_AGAIN)\b/.test(message)) return f('destination-down', 'endpoint');
  if (THROTTLED.test(name) || status === 429 || status >= 500) return f('retriable');
  if (ENTRY_PERMANENT.test(name) || name === 'BatchRequestTooLong' || name === 'BatchEntryIdsNotDistinct' || name === 'TooManyEntriesInBatchRequest') return f('permanent');
  // A client fault we do not know: the service will answer it the same way again.
  if (e.$fault === 'client' && status >= 400 && status < 500) return f('permanent');
  // Timeouts, resets, aborted sockets and anything unexpected.
  return f('retriable');
}

/** Classifies one failed entry of SendMessageBatch or PublishBatch. */
export function classifyEntryError(entry: { readonly Code?: string | undefined; readonly Message?: string | undefined; readonly SenderFault?: boolean | undefined }): AwsFailure {
  const name = (entry.Code ?? 'Unknown').replace(/^.*#/, '');
  const reason = `${name}: ${entry.Message ?? 'no message'}`;
  const f = (kind: TransportErrorKind, setting: AwsFailure['setting'] = null): AwsFailure => ({ kind, scope: 'entry', setting, reason });
  if (MISSING.test(name)) return f('destination-down');
  if (DENIED.test(name)) return f('destination-down', 'credentials');
  if (KMS_DOWN.test(name)) return f('destination-down');
  if (THROTTLED.test(name)) return f('retriable');
  if (ENTRY_PERMANENT.test(name)) return f('permanent');
  // SenderFault: the request's content is at fault, sending it again will not help.
  return f(entry.SenderFault === true ? 'permanent' : 'retriable');
}

/** The outcome after `failure`, naming where it went (`queue "https://..." (destination "orders")`). */
export function failedOutcome(failure: AwsFailure, where: string): PublishOutcome {
  let advice = '';
  if (failure.setting === 'credentials') advice = '; the credentials were refused or lack permission (sqs:SendMessage / sns:Publish on it): the relay pauses this destination and probes until they work';
  else if (failure.setting === 'endpoint') advice = '; nothing answers at the endpoint: the relay pauses this destination and probes until it does';
  else if (failure.kind === 'destination-down') advice = '; it does not exist or its KMS key is unusable (check the URL or ARN, region and account): the relay pauses this destination and probes until it works';
  else if (failure.kind === 'retriable') advice = '; retriable: the relay backs off and sends again (a request that timed out may have been stored: at-least-once)';
  else advice = '; the service refuses this message: it is parked';
  return { ok: false, error: new TransportError(failure.kind, `send to ${where} failed: ${failure.reason}${advice}`) };
}

export function abortedOutcome(where: string): PublishOutcome {
  return {
    ok: false,
    error: new TransportError('retriable', `send to ${where} was cancelled by the caller's signal (publish timeout or relay stop) before an answer; it may still have been stored, so it may arrive twice (at-least-once)`),
  };
}

export function unroutableOutcome(destination: string, field: 'queues' | 'topics'): PublishOutcome {
  return {
    ok: false,
    error: new TransportError('permanent', `unroutable: destination ${JSON.stringify(destination)} has no ${field === 'queues' ? 'queue URL' : 'topic ARN'} in ${field}; add it to ${field}`),
  };
}

/** The error `start()` throws when checking a queue or topic fails on configuration: a ConfigError naming the setting. */
export function startError(failure: AwsFailure, where: string, err: unknown): ConfigError | null {
  if (failure.setting === 'credentials') {
    return new ConfigError('credentials', `${where} refused the credentials or their permissions (${failure.reason}); check the credentials (the SDK's default chain, or credentials/clientConfig) and the principal's policy`, { cause: err });
  }
  if (failure.setting === 'endpoint') {
    return new ConfigError('endpoint', `cannot reach ${where} (${failure.reason}); check endpoint and region (or the client's), and that the service is reachable`, { cause: err });
  }
  return null;
}

/**
 * The start-time check of SqsTransport and SnsTransport: runs `check` for each
 * mapped destination within `requestTimeoutMs`. Refused credentials throw the
 * ConfigError naming the setting; anything else (nothing answers at the
 * endpoint, a timeout, a missing queue or topic) is logged, and its events
 * wait as destination-down until it answers.
 */
export async function checkAtStart(
  targets: ReadonlyMap<string, string>,
  check: (address: string, abortSignal: AbortSignal) => Promise<unknown>,
  context: {
    readonly signal: AbortSignal | undefined;
    readonly requestTimeoutMs: number;
    readonly logger: Logger;
    readonly transport: 'sqs' | 'sns';
    readonly describe: (address: string, destination: string) => string;
  },
): Promise<void> {
  const { signal } = context;
  const timeout = AbortSignal.timeout(context.requestTimeoutMs);
  const abortSignal = signal ? AbortSignal.any([signal, timeout]) : timeout;
  const noun = context.transport === 'sqs' ? 'queue' : 'topic';
  await Promise.all(
    [...targets].map(async ([destination, address]) => {
      try {
        await check(address, abortSignal);
      } catch (err) {
        signal?.throwIfAborted();
        const failure = classifyRequestError(err);
        const error = startError(failure, context.describe(address, destination), err);
        // Nothing answers at the endpoint: an outage, which waiting heals (core/broker-outage.ts); start anyway.
        if (error && brokerOutage(err) === null) throw error;
        if (failure.setting === 'endpoint') return warnOutageAtStart(context.logger, { transport: context.transport, address: context.describe(address, destination), reason: failure.reason });
        context.logger.warn({ transport: context.transport, destination, [noun]: address, reason: failure.reason }, `${context.transport} ${noun} check failed at start; its events wait until it answers`);
      }
    }),
  );
}
