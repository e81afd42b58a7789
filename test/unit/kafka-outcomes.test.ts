/**
 * How kafkajs errors are classified, built the way kafkajs builds them
 * (a protocol error wrapped by its retrier), and what the messages say.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import { ConfigError } from 'txbox';
import { classifyKafkaError, failedSend, startError, unroutable } from '../../src/transports/kafka/kafka-outcomes.ts';

/** kafkajs's error classes, with the constructor arguments its own code passes (its typings declare fewer). */
type ErrorClass = new (e: unknown, options?: object) => Error & { retriable: boolean };
const NAMES = [
  'KafkaJSProtocolError',
  'KafkaJSNumberOfRetriesExceeded',
  'KafkaJSNonRetriableError',
  'KafkaJSConnectionError',
  'KafkaJSRequestTimeoutError',
  'KafkaJSConnectionClosedError',
  'KafkaJSSASLAuthenticationError',
  'KafkaJSMetadataNotLoaded',
] as const;
const errors = kafkajs as unknown as Record<(typeof NAMES)[number], ErrorClass>;
const { KafkaJSProtocolError, KafkaJSNumberOfRetriesExceeded, KafkaJSNonRetriableError, KafkaJSConnectionError, KafkaJSRequestTimeoutError, KafkaJSConnectionClosedError } = errors;
const { KafkaJSSASLAuthenticationError, KafkaJSMetadataNotLoaded } = errors;

const CODES: Record<string, [number, boolean]> = {
  MESSAGE_TOO_LARGE: [10, false],
  RECORD_LIST_TOO_LARGE: [18, false],
  INVALID_RECORD: [87, false],
  UNKNOWN_TOPIC_OR_PARTITION: [3, true],
  LEADER_NOT_AVAILABLE: [5, true],
  NOT_LEADER_FOR_PARTITION: [6, true],
  REQUEST_TIMED_OUT: [7, true],
  NETWORK_EXCEPTION: [13, true],
  NOT_ENOUGH_REPLICAS: [19, true],
  NOT_ENOUGH_REPLICAS_AFTER_APPEND: [20, true],
  TOPIC_AUTHORIZATION_FAILED: [29, false],
  CLUSTER_AUTHORIZATION_FAILED: [31, false],
  SASL_AUTHENTICATION_FAILED: [58, false],
  ILLEGAL_SASL_STATE: [34, false],
  OUT_OF_ORDER_SEQUENCE_NUMBER: [45, false],
  INVALID_PRODUCER_EPOCH: [47, false],
  UNSUPPORTED_COMPRESSION_TYPE: [76, false],
  KAFKA_STORAGE_ERROR: [56, true],
  SOMETHING_NEW: [999, false],
};

function protocol(type: string): Error {
  const [code, retriable] = CODES[type]!;
  return new KafkaJSProtocolError({ message: `broker says ${type}`, type, code, retriable });
}

/** What sendBatch rejects with: the retrier's wrapper around the last error. */
function asThrownBySend(err: Error & { retriable?: boolean }): Error {
  return err.retriable === false
    ? new KafkaJSNonRetriableError(err, { cause: err })
    : new KafkaJSNumberOfRetriesExceeded(err, { retryCount: 2, retryTime: 800 });
}

describe('classifyKafkaError', () => {
  it('retriable: leader moves, replicas short, timeouts, network and storage trouble', () => {
    for (const type of ['LEADER_NOT_AVAILABLE', 'NOT_LEADER_FOR_PARTITION', 'REQUEST_TIMED_OUT', 'NETWORK_EXCEPTION', 'NOT_ENOUGH_REPLICAS', 'NOT_ENOUGH_REPLICAS_AFTER_APPEND', 'KAFKA_STORAGE_ERROR']) {
      const f = classifyKafkaError(asThrownBySend(protocol(type)));
      assert.equal(f.kind, 'retriable', type);
      assert.equal(f.scope, 'call', type);
      assert.match(f.reason, new RegExp(type));
      assert.match(f.reason, /gave up after 3 attempts/);
    }
  });

  it('destination-down: connection refused (as sendBatch reports it: a non-retriable wrapper around a connection error), closed, or a request timed out (no answer)', () => {
    const refused = new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:9092', { broker: '127.0.0.1:9092', code: 'ECONNREFUSED' });
    const wrapped = new KafkaJSNonRetriableError(new KafkaJSNumberOfRetriesExceeded(refused, { retryCount: 2, retryTime: 1 }), { cause: refused });
    assert.equal(wrapped.retriable, false, 'kafkajs calls the wrapper non-retriable');
    const f = classifyKafkaError(wrapped);
    assert.equal(f.kind, 'destination-down');
    assert.equal(f.setting, 'brokers');
    assert.match(f.reason, /ECONNREFUSED/);
    const timeout = new KafkaJSRequestTimeoutError('Request Produce(key: 0, version: 7) timed out', { broker: 'b:9092', correlationId: 1, createdAt: 0, sentAt: 0, pendingDuration: 0 });
    assert.equal(classifyKafkaError(asThrownBySend(timeout)).kind, 'destination-down');
    const closed = new KafkaJSConnectionClosedError('Closed connection', { host: 'b', port: 9092 });
    assert.equal(classifyKafkaError(asThrownBySend(closed)).kind, 'destination-down');
  });

  it('permanent per record: too large, invalid record; the send can be split to isolate them', () => {
    for (const type of ['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'SOMETHING_NEW']) {
      const f = classifyKafkaError(asThrownBySend(protocol(type)));
      assert.deepEqual([f.kind, f.scope], ['permanent', 'record'], type);
    }
  });

  it('permanent per topic: not authorized; a missing topic is checked before deciding', () => {
    const denied = classifyKafkaError(asThrownBySend(protocol('TOPIC_AUTHORIZATION_FAILED')));
    assert.deepEqual([denied.kind, denied.scope], ['permanent', 'topic']);
    const missing = classifyKafkaError(asThrownBySend(protocol('UNKNOWN_TOPIC_OR_PARTITION')));
    assert.deepEqual([missing.kind, missing.scope, missing.unknownTopic], ['retriable', 'topic', true]);
    const noMetadata = classifyKafkaError(asThrownBySend(new KafkaJSMetadataNotLoaded('Producing to topic without metadata')));
    assert.equal(noMetadata.unknownTopic, true);
  });

  it('credentials and permissions name sasl; compression names compression', () => {
    for (const err of [protocol('SASL_AUTHENTICATION_FAILED'), protocol('ILLEGAL_SASL_STATE'), protocol('CLUSTER_AUTHORIZATION_FAILED'), new KafkaJSSASLAuthenticationError('SASL PLAIN authentication failed')]) {
      const f = classifyKafkaError(err);
      assert.deepEqual([f.kind, f.scope, f.setting], ['destination-down', 'call', 'sasl'], f.reason);
    }
    assert.equal(classifyKafkaError(asThrownBySend(protocol('UNSUPPORTED_COMPRESSION_TYPE'))).setting, 'compression');
  });

  it('producer state errors are retriable: the transport replaces the producer after any failed send', () => {
    for (const type of ['OUT_OF_ORDER_SEQUENCE_NUMBER', 'INVALID_PRODUCER_EPOCH']) {
      assert.deepEqual([classifyKafkaError(asThrownBySend(protocol(type))).kind], ['retriable'], type);
    }
  });

  it('anything unexpected is retriable, with its message', () => {
    const f = classifyKafkaError(new TypeError('boom'));
    assert.equal(f.kind, 'retriable');
    assert.match(f.reason, /TypeError: boom/);
    assert.equal(classifyKafkaError('a string').kind, 'retriable');
  });
});

describe('outcome messages', () => {
  const o = { display: '127.0.0.1:9092', saslMechanism: 'PLAIN' };

  it('name the topic, the broker answer, and whether it is retried', () => {
    const big = failedSend(classifyKafkaError(asThrownBySend(protocol('MESSAGE_TOO_LARGE'))), 'orders', o);
    assert.ok(!big.ok);
    assert.equal(big.error.kind, 'permanent');
    assert.match(big.error.message, /topic "orders"/);
    assert.match(big.error.message, /MESSAGE_TOO_LARGE/);
    const down = failedSend(classifyKafkaError(asThrownBySend(protocol('LEADER_NOT_AVAILABLE'))), null, o);
    assert.ok(!down.ok);
    assert.match(down.error.message, /retriable.*at-least-once/);
    const lost = unroutable('shop.orders', 'orders');
    assert.ok(!lost.ok);
    assert.match(lost.error.message, /^unroutable: topic "shop.orders" \(destination "orders"\) does not exist/);
  });

  it('start() errors are ConfigErrors naming brokers, sasl or compression', () => {
    const refused = new KafkaJSNumberOfRetriesExceeded(new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:1'), { retryCount: 2, retryTime: 1 });
    const e1 = startError(refused, { display: '127.0.0.1:1', saslMechanism: null });
    assert.ok(e1 instanceof ConfigError);
    assert.equal(e1.field, 'brokers');
    assert.match(e1.message, /127\.0\.0\.1:1/);
    const e2 = startError(protocol('ILLEGAL_SASL_STATE'), o);
    assert.equal(e2.field, 'sasl');
    assert.match(e2.message, /does not take SASL PLAIN/);
    const e3 = startError(new KafkaJSSASLAuthenticationError('SASL SCRAM-SHA-512 authentication failed: Authentication failed'), o);
    assert.equal(e3.field, 'sasl');
    assert.match(e3.message, /refused the credentials/);
  });
});
