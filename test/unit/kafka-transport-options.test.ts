/** KafkaTransport options: defaults, validation naming the field, no credentials in messages. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Kafka, logLevel } from 'kafkajs';
import { ConfigError } from 'txbox';
import { KafkaTransport, resolveKafkaTransportOptions, topicOf, type KafkaTransportOptions } from 'txbox/kafka';

function refuses(options: unknown, field: string | RegExp): ConfigError {
  let caught: unknown;
  try {
    resolveKafkaTransportOptions(options as KafkaTransportOptions);
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof ConfigError, `expected a ConfigError, got ${String(caught)}`);
  if (typeof field === 'string') assert.equal(caught.field, field);
  else assert.match(caught.field, field);
  assert.ok(caught.message.startsWith(`${caught.field}: `));
  return caught;
}

describe('resolveKafkaTransportOptions', () => {
  it('fills the documented defaults and freezes the result', () => {
    const o = resolveKafkaTransportOptions({});
    assert.ok(Object.isFrozen(o));
    assert.equal(o.connection.kind, 'config');
    if (o.connection.kind !== 'config') return;
    assert.deepEqual(o.connection.brokers, ['127.0.0.1:9092']);
    assert.equal(o.connection.clientId, 'txbox');
    assert.equal(o.connection.ssl, undefined);
    assert.equal(o.connection.sasl, undefined);
    assert.equal(o.connection.connectionTimeoutMs, 3000);
    assert.equal(o.requestTimeoutMs, 10_000);
    assert.equal(o.maxMessageBytes, 1_048_576);
    assert.equal(o.allowAutoTopicCreation, false);
    assert.equal(o.compression, 'none');
    assert.equal(o.clientRetries, 2);
    assert.equal(o.producers, 2);
    assert.equal(o.topicPrefix, '');
    assert.equal(o.display, '127.0.0.1:9092');
    assert.equal(o.saslMechanism, null);
    assert.deepEqual(resolveKafkaTransportOptions(), o);
  });

  it('maps destinations to topics: the topics map first, else topicPrefix + destination', () => {
    const o = resolveKafkaTransportOptions({ topics: { orders: 'shop.orders.v1' }, topicPrefix: 'shop.' });
    assert.equal(topicOf(o, 'orders'), 'shop.orders.v1');
    assert.equal(topicOf(o, 'payments'), 'shop.payments');
    assert.equal(topicOf(o, 'bad name'), null, 'not a legal topic: the event fails, not the options');
    assert.equal(topicOf(resolveKafkaTransportOptions({}), 'orders'), 'orders');
  });

  it('refuses malformed brokers without quoting them', () => {
    refuses({ brokers: [] }, 'brokers');
    refuses({ brokers: '127.0.0.1:9092' }, 'brokers');
    refuses({ brokers: ['127.0.0.1'] }, 'brokers[0]');
    refuses({ brokers: ['127.0.0.1:9092', 'kafka://x:9092'] }, 'brokers[1]');
    refuses({ brokers: ['h:99999'] }, 'brokers[0]');
    const err = refuses({ brokers: ['relay:s3cret@kafka:9092'] }, 'brokers[0]');
    assert.doesNotMatch(err.message, /s3cret/);
    const ok = resolveKafkaTransportOptions({ brokers: ['[::1]:9092', 'kafka-1.internal:9093'] });
    assert.equal(ok.display, '[::1]:9092,kafka-1.internal:9093');
  });

  it('checks sasl without ever quoting it', () => {
    const secret = 'hunter2-very-secret';
    for (const [sasl, field] of [
      [{ mechanism: 'gssapi', username: 'u', password: secret }, 'sasl.mechanism'],
      [{ mechanism: 'plain', password: secret }, 'sasl.username'],
      [{ mechanism: 'scram-sha-512', username: 'u' }, 'sasl.password'],
      ['plain', 'sasl'],
    ] as const) {
      const err = refuses({ sasl }, field);
      assert.doesNotMatch(err.message, new RegExp(secret));
    }
    const o = resolveKafkaTransportOptions({ sasl: { mechanism: 'scram-sha-256', username: 'relay', password: secret } });
    assert.equal(o.saslMechanism, 'SCRAM-SHA-256');
  });

  it('checks numbers, booleans, names and the logger', () => {
    refuses({ maxMessageBytes: 10 }, 'maxMessageBytes');
    refuses({ maxMessageBytes: 1.5e6 + 0.5 }, 'maxMessageBytes');
    refuses({ requestTimeoutMs: 0 }, 'requestTimeoutMs');
    refuses({ connectionTimeoutMs: -1 }, 'connectionTimeoutMs');
    refuses({ clientRetries: 100 }, 'clientRetries');
    refuses({ producers: 0 }, 'producers');
    refuses({ allowAutoTopicCreation: 'yes' }, 'allowAutoTopicCreation');
    refuses({ topicPrefix: 'shop/' }, 'topicPrefix');
    refuses({ topics: { orders: 'has space' } }, 'topics.orders');
    refuses({ topics: ['orders'] }, 'topics');
    refuses({ clientId: '' }, 'clientId');
    refuses({ ssl: 'yes' }, 'ssl');
    refuses({ logger: console.log }, 'logger');
    refuses(null, 'options');
  });

  it('refuses compression codecs kafkajs does not have', () => {
    refuses({ compression: 'brotli' }, 'compression');
    const err = refuses({ compression: 'zstd' }, 'compression');
    assert.match(err.message, /CompressionCodecs/);
    assert.equal(resolveKafkaTransportOptions({ compression: 'gzip' }).compression, 'gzip');
  });

  it('takes an existing Kafka instance, but not together with connection settings', () => {
    const kafka = new Kafka({ brokers: ['127.0.0.1:9092'], logLevel: logLevel.NOTHING });
    const o = resolveKafkaTransportOptions({ kafka });
    assert.equal(o.connection.kind, 'instance');
    for (const field of ['brokers', 'clientId', 'ssl', 'sasl', 'requestTimeoutMs', 'connectionTimeoutMs'] as const) {
      const extra = { brokers: ['h:1'], clientId: 'x', ssl: true, sasl: { mechanism: 'plain', username: 'u', password: 'p' }, requestTimeoutMs: 1000, connectionTimeoutMs: 1000 }[field];
      refuses({ kafka, [field]: extra }, field);
    }
    refuses({ kafka: {} }, 'kafka');
  });

  it('the constructor validates and connects nothing', async () => {
    assert.throws(() => new KafkaTransport({ producers: 99 }), (e: unknown) => e instanceof ConfigError && e.field === 'producers');
    const transport = new KafkaTransport({ brokers: ['127.0.0.1:1'] });
    assert.equal(transport.name, 'kafka');
    await transport.close();
  });
});
