/**
 * How a Kafka client error becomes a PublishOutcome (or, at start, a
 * ConfigError naming the setting). kafkajs wraps the broker's answer:
 * `KafkaJSNumberOfRetriesExceeded` or `KafkaJSNonRetriableError` around a
 * `KafkaJSProtocolError` (with the protocol's `type`, e.g. MESSAGE_TOO_LARGE)
 * or a connection error, each with a `retriable` flag. The chain is walked
 * down to its leaf. Errors are read by name and type, not `instanceof`, so
 * that a Kafka instance from another copy of kafkajs classifies the same.
 */
import { ConfigError, TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { brokerOutage } from '../../core/broker-outage.ts';

export const ACK: PublishOutcome = Object.freeze({ ok: true });

/** What a failed send was about, and so whether sending fewer events at once could isolate it. */
export type KafkaFailureScope = 'call' | 'topic' | 'record';

export interface KafkaFailure {
  readonly kind: TransportErrorKind;
  readonly scope: KafkaFailureScope;
  /** The topic (or its metadata) was not found: check whether it exists before deciding. */
  readonly unknownTopic: boolean;
  /** The option to fix, when the failure is one of configuration. */
  readonly setting: 'sasl' | 'brokers' | 'compression' | null;
  /** What happened, from the client's error: its name, protocol type and message. No payload, no credentials. */
  readonly reason: string;
  readonly cause: unknown;
}

const SASL = new Set(['SASL_AUTHENTICATION_FAILED', 'ILLEGAL_SASL_STATE', 'UNSUPPORTED_SASL_MECHANISM']);
const PRINCIPAL = new Set(['CLUSTER_AUTHORIZATION_FAILED', 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED']);
const TOPIC_PERMANENT = new Set(['TOPIC_AUTHORIZATION_FAILED', 'INVALID_TOPIC_EXCEPTION', 'POLICY_VIOLATION']);
const RECORD_PERMANENT = new Set(['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'INVALID_TIMESTAMP', 'UNSUPPORTED_FOR_MESSAGE_FORMAT']);
/** The broker lost track of this producer's sequence numbers: a fresh producer (which the transport makes after every failed send) fixes it. */
const PRODUCER_STATE = new Set([
  'OUT_OF_ORDER_SEQUENCE_NUMBER',
  'DUPLICATE_SEQUENCE_NUMBER',
  'INVALID_PRODUCER_EPOCH',
  'UNKNOWN_PRODUCER_ID',
  'INVALID_PRODUCER_ID_MAPPING',
  'PRODUCER_FENCED',
]);
const METADATA_MISSING = new Set(['KafkaJSMetadataNotLoaded', 'KafkaJSTopicMetadataNotLoaded']);
const CONNECTION = new Set(['KafkaJSConnectionError', 'KafkaJSConnectionClosedError', 'KafkaJSRequestTimeoutError', 'KafkaJSBrokerNotFound']);

interface ErrorLike {
  readonly name?: unknown;
  readonly message?: unknown;
  readonly type?: unknown;
  readonly retriable?: unknown;
  readonly retryCount?: unknown;
  readonly cause?: unknown;
}

/** The error and its causes, outermost first (at most 8 deep). */
function chainOf(err: unknown): ErrorLike[] {
  const chain: ErrorLike[] = [];
  let e: unknown = err;
  while (e !== null && typeof e === 'object' && chain.length < 8 && !chain.includes(e as ErrorLike)) {
    chain.push(e as ErrorLike);
    e = (e as ErrorLike).cause;
  }
  return chain.length > 0 ? chain : [{ name: 'Error', message: String(err) }];
}

/** Classifies an error thrown by a send (or a connect) of the Kafka client. */
export function classifyKafkaError(err: unknown): KafkaFailure {
  const chain = chainOf(err);
  const leaf = chain[chain.length - 1]!;
  const names = chain.map((e) => String(e.name ?? ''));
  const type = chain.map((e) => (typeof e.type === 'string' ? e.type : '')).findLast((t) => t !== '') ?? '';
  const gaveUp = chain.find((e) => e.name === 'KafkaJSNumberOfRetriesExceeded');
  const attempts = typeof gaveUp?.retryCount === 'number' ? ` (the client gave up after ${gaveUp.retryCount + 1} attempts)` : '';
  const reason = `${String(leaf.name ?? 'Error')}${type ? ` ${type}` : ''}: ${String(leaf.message ?? '')}${attempts}`;
  const f = (kind: TransportErrorKind, scope: KafkaFailureScope, setting: KafkaFailure['setting'] = null, unknownTopic = false): KafkaFailure => ({
    kind,
    scope,
    unknownTopic,
    setting,
    reason,
    cause: err,
  });
  // Refused credentials concern every event: destination-down, so the relay pauses instead of parking every key.
  if (SASL.has(type) || names.includes('KafkaJSSASLAuthenticationError')) return f('destination-down', 'call', 'sasl');
  if (PRINCIPAL.has(type)) return f('destination-down', 'call', 'sasl');
  if (type === 'UNSUPPORTED_COMPRESSION_TYPE' || names.includes('KafkaJSNotImplemented')) return f('permanent', 'call', 'compression');
  if (TOPIC_PERMANENT.has(type)) return f('permanent', 'topic');
  if (type === 'UNKNOWN_TOPIC_OR_PARTITION' || names.some((n) => METADATA_MISSING.has(n))) return f('retriable', 'topic', null, true);
  if (RECORD_PERMANENT.has(type)) return f('permanent', 'record');
  if (PRODUCER_STATE.has(type)) return f('retriable', 'call');
  // Refused, unreachable, reset, closed or no answer within requestTimeoutMs: about the connection to the
  // cluster, never the records (their size is checked before sending). Destination-down, so that an outage
  // of any length (a broker restart, a black hole) pauses the destination instead of spending attempts.
  if (names.some((n) => CONNECTION.has(n))) return f('destination-down', 'call', 'brokers');
  // Another protocol error the client will not retry: isolate the events it concerns.
  if (type !== '' && leaf.retriable === false) return f('permanent', 'record');
  // Retriable protocol errors (leader moved, not enough replicas, timeouts), and anything unexpected.
  return f('retriable', 'call');
}

/** The outcome for events of `topic` (null: several topics) after `failure`. */
export function failedSend(failure: KafkaFailure, topic: string | null, o: { readonly display: string }): PublishOutcome {
  const where = topic === null ? `to ${o.display}` : `to topic ${JSON.stringify(topic)} at ${o.display}`;
  let advice = '';
  if (failure.setting === 'sasl') advice = '; check sasl (mechanism, username, password) and the principal\'s ACLs';
  else if (failure.setting === 'compression') advice = '; check compression (the broker or the client does not support it)';
  else if (failure.scope === 'record' && failure.kind === 'permanent') advice = '; the broker refuses this message (lower its size under the topic\'s max.message.bytes and maxMessageBytes, or fix the record)';
  else if (failure.scope === 'topic' && failure.kind === 'permanent') advice = '; the broker refuses this topic (ACLs: Write on the topic for the principal; topic name or policy)';
  else if (failure.kind === 'destination-down') advice = '; the cluster is not answering at that address (refused, unreachable, dropped or timed out; check brokers): the relay pauses this destination and probes until it answers';
  else if (failure.kind === 'retriable') advice = '; retriable: the relay backs off and sends again (a send that timed out may already be written: at-least-once)';
  return fail(failure.kind, `produce ${where} failed: ${failure.reason}${advice}`, failure.cause);
}

/** The admin client could not list the topics (cluster unreachable, not authorized to describe). */
export function topicCheckFailed(failure: KafkaFailure, topic: string, o: { readonly display: string }): PublishOutcome {
  const advice =
    failure.setting === 'sasl'
      ? '; check sasl (mechanism, username, password) and the principal\'s ACLs (Describe on the topic)'
      : failure.kind === 'destination-down'
        ? '; no broker answers at that address (check brokers): the relay pauses this destination and probes until one does'
        : '; retriable: the relay backs off and checks again';
  return fail(failure.kind, `cannot check that topic ${JSON.stringify(topic)} exists at ${o.display}: ${failure.reason}${advice}`, failure.cause);
}

export function unroutable(topic: string, destination: string): PublishOutcome {
  const named = topic === destination ? '' : ` (destination ${JSON.stringify(destination)})`;
  return fail(
    'permanent',
    `unroutable: topic ${JSON.stringify(topic)}${named} does not exist and allowAutoTopicCreation is off; create the topic, map the destination in topics, or set allowAutoTopicCreation`,
  );
}

export function abortedSend(o: { readonly display: string }): PublishOutcome {
  return fail(
    'retriable',
    `no ack from ${o.display} before the caller's signal aborted the publish (publish timeout or relay stop); the broker may still write these events, so they may arrive twice (at-least-once)`,
  );
}

/**
 * Whether a failed connect is an outage that waiting heals (broker-outage.ts):
 * a network error, no broker found, a connect timeout, or a retriable
 * protocol error of a cluster still starting (no leader, coordinator
 * loading). Refused credentials, TLS trouble and compression are not.
 */
export function kafkaOutage(err: unknown): string | null {
  const network = brokerOutage(err);
  if (network !== null) return network;
  const failure = classifyKafkaError(err);
  if (failure.setting === 'sasl' || failure.setting === 'compression') return null;
  const chain = chainOf(err);
  if (chain.some((e) => e.name === 'KafkaJSBrokerNotFound')) return failure.reason;
  if (chain.some((e) => e.name === 'KafkaJSConnectionError' && /connection timeout/i.test(String(e.message ?? '')))) return failure.reason;
  if (chain.some((e) => typeof e.type === 'string' && e.type !== '' && e.retriable === true)) return failure.reason;
  return null;
}

/**
 * The error `start()` throws for a failed connect: a ConfigError naming the
 * setting to fix (`sasl`, `compression`, or `brokers` for anything that keeps
 * the cluster out of reach: a wrong address, TLS trouble, a broker down).
 */
export function startError(err: unknown, o: { readonly display: string; readonly saslMechanism: string | null }): ConfigError {
  const failure = classifyKafkaError(err);
  const cause = { cause: err };
  if (failure.setting === 'sasl') {
    if (failure.reason.includes('ILLEGAL_SASL_STATE')) {
      return new ConfigError(
        'sasl',
        `${o.display} does not take SASL ${o.saslMechanism ?? ''} authentication on this listener (${failure.reason}; a PLAINTEXT or SSL listener answers so); point brokers at the SASL_PLAINTEXT or SASL_SSL listener, or remove sasl`,
        cause,
      );
    }
    return new ConfigError('sasl', `${o.display} refused the credentials or their permissions (${failure.reason}); check sasl (mechanism, username, password) and the principal's ACLs`, cause);
  }
  if (failure.setting === 'compression') return new ConfigError('compression', `is not usable with ${o.display} (${failure.reason})`, cause);
  return new ConfigError('brokers', `could not connect to the Kafka cluster at ${o.display} (${failure.reason}); check brokers (host:port of a listener), ssl, and that Kafka is running`, cause);
}

export function fail(kind: TransportErrorKind, message: string, cause?: unknown): PublishOutcome {
  return { ok: false, error: new TransportError(kind, message, cause === undefined ? {} : { cause }) };
}
