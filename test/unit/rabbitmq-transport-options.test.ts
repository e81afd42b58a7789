import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, type OutboxEvent } from 'txbox';
import {
  RABBITMQ_MAX_MESSAGE_BYTES,
  RabbitMqTransport,
  decodeRabbitMqMessage,
  encodeRabbitMqMessage,
  resolveRabbitMqTransportOptions,
  type RabbitMqTransportOptions,
} from 'txbox/rabbitmq';

const url = 'amqp://relay:hunter2@rabbit.internal:5672/orders?frameMax=131072';

function configError(options: unknown, field: string, text?: RegExp): void {
  assert.throws(
    () => resolveRabbitMqTransportOptions(options as RabbitMqTransportOptions),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
      assert.equal(e.field, field);
      if (text) assert.match(e.message, text);
      assert.doesNotMatch(e.message, /hunter2/);
      return true;
    },
  );
}

describe('resolveRabbitMqTransportOptions', () => {
  it('fills defaults and freezes; the display URL has no credentials or query', () => {
    const o = resolveRabbitMqTransportOptions({ url });
    assert.equal(o.display, 'amqp://rabbit.internal:5672/orders');
    assert.equal(new URL(o.url).searchParams.get('heartbeat'), '15');
    assert.equal(new URL(o.url).searchParams.get('frameMax'), '131072');
    assert.equal(o.exchange, '');
    assert.equal(o.destinations.size, 0);
    assert.equal(o.assertExchanges, false);
    assert.equal(o.exchangeType, 'topic');
    assert.equal(o.maxMessageBytes, 16 * 1024 * 1024);
    assert.equal(o.confirmTimeoutMs, 15_000);
    assert.equal(o.connectTimeoutMs, 10_000);
    assert.equal(o.reconnectInitialDelayMs, 200);
    assert.equal(o.reconnectMaxDelayMs, 10_000);
    assert.equal(o.channels, 1);
    assert.equal(o.connectionName, 'txbox');
    assert.deepEqual(o.socket, { noDelay: true, keepAlive: true });
    assert.ok(Object.isFrozen(o) && Object.isFrozen(o.socket));
    assert.equal(resolveRabbitMqTransportOptions({ url: 'amqps://[::1]' }).display, 'amqps://[::1]:5671/');
  });

  it('maps destinations to an exchange and routing key', () => {
    const byType = (e: OutboxEvent): string => e.type;
    const o = resolveRabbitMqTransportOptions({
      url,
      exchange: 'events',
      destinations: { orders: { routingKey: 'order.v1' }, payments: { exchange: 'payments', routingKey: byType }, audit: {} },
    });
    assert.deepEqual({ ...o.destinations.get('orders') }, { exchange: 'events', routingKey: 'order.v1', routingKeyOf: null });
    assert.deepEqual({ ...o.destinations.get('payments') }, { exchange: 'payments', routingKey: null, routingKeyOf: byType });
    assert.deepEqual({ ...o.destinations.get('audit') }, { exchange: 'events', routingKey: 'audit', routingKeyOf: null });
  });

  it('names the field of a bad URL without quoting it', () => {
    configError({}, 'url', /is required/);
    configError({ url: 'not a url' }, 'url', /absolute URL/);
    configError({ url: 'http://relay:hunter2@rabbit.internal/' }, 'url', /only amqp: and amqps:/);
    configError({ url: 'amqp://relay:hunter2@rabbit.internal/?heartbeat=5' }, 'url', /heartbeatSeconds/);
    configError({ url: 42 }, 'url');
  });

  it('checks exchange names, routing keys and the exchange type', () => {
    configError({ url, exchange: 'bad name' }, 'exchange', /letters, digits/);
    configError({ url, destinations: { orders: { exchange: 'x'.repeat(256) } } }, 'destinations.orders.exchange');
    configError({ url, destinations: { orders: { routingKey: 'k'.repeat(256) } } }, 'destinations.orders.routingKey', /255 bytes/);
    configError({ url, destinations: { orders: { routingKey: 5 } } }, 'destinations.orders.routingKey');
    configError({ url, destinations: { orders: null } }, 'destinations.orders');
    configError({ url, destinations: 'orders' }, 'destinations');
    configError({ url, exchangeType: 'x-delayed-message' }, 'exchangeType', /direct, topic, fanout, headers/);
    configError({ url, assertExchanges: 'yes' }, 'assertExchanges');
  });

  it('checks numbers and ranges', () => {
    configError({ url, maxMessageBytes: 0 }, 'maxMessageBytes', /integer from 1/);
    configError({ url, maxMessageBytes: RABBITMQ_MAX_MESSAGE_BYTES + 1 }, 'maxMessageBytes');
    configError({ url, confirmTimeoutMs: 1.5 }, 'confirmTimeoutMs');
    configError({ url, connectTimeoutMs: -1 }, 'connectTimeoutMs');
    configError({ url, heartbeatSeconds: 3601 }, 'heartbeatSeconds');
    configError({ url, channels: 65 }, 'channels');
    configError({ url, reconnectInitialDelayMs: 5000, reconnectMaxDelayMs: 1000 }, 'reconnectMaxDelayMs', /at least reconnectInitialDelayMs/);
    configError({ url, connectionName: '' }, 'connectionName');
    configError({ url, socket: 'tls' }, 'socket');
    configError({ url, logger: {} }, 'logger');
  });

  it('the constructor validates and does not connect', () => {
    assert.throws(() => new RabbitMqTransport({ url: 'amqp://host', channels: 0 }), ConfigError);
    assert.equal(new RabbitMqTransport({ url: 'amqp://127.0.0.1:1' }).name, 'rabbitmq');
  });
});

describe('encodeRabbitMqMessage / decodeRabbitMqMessage', () => {
  const event: OutboxEvent = {
    id: '0193a8f0-0000-7000-8000-000000000001',
    type: 'OrderCreated',
    aggregateType: 'Order',
    aggregateId: '17',
    key: 'Order:17',
    destination: 'orders',
    payload: { total: 12.5, items: ['a'] },
    headers: { traceparent: '00-abc-def-01' },
    occurredAt: new Date('2025-01-02T03:04:05.678Z'),
    version: 3,
  };

  it('refuses an event header it cannot carry (txbox-*, CC, BCC) with the header named, instead of dropping it', () => {
    for (const name of ['txbox-key', 'CC', 'BCC']) {
      assert.throws(() => encodeRabbitMqMessage({ ...event, headers: { traceparent: 't', [name]: 'forged' } }), { code: 'TXBOX_INVALID_EVENT', field: `headers.${name}` });
    }
  });

  it('round-trips the envelope', () => {
    const { content, properties } = encodeRabbitMqMessage(event);
    assert.equal(content.toString(), '{"total":12.5,"items":["a"]}');
    assert.equal(properties.deliveryMode, 2);
    assert.equal(properties.mandatory, true);
    assert.equal(properties.messageId, event.id);
    assert.equal(properties.timestamp, 1735787045);
    assert.equal(properties.headers['txbox-key'], 'Order:17');
    assert.equal(properties.headers.BCC, undefined);
    const decoded = decodeRabbitMqMessage({ content, properties: properties as never, fields: { routingKey: 'orders' } as never });
    assert.ok(decoded.ok);
    assert.deepEqual(decoded.event, { ...event, headers: { traceparent: '00-abc-def-01' } });
  });

  it('refuses what cannot be serialized, and explains an undecodable message', () => {
    assert.throws(() => encodeRabbitMqMessage({ ...event, payload: { n: 1n } }), TypeError);
    const msg = (properties: object, body = '{}') => ({ content: Buffer.from(body), properties: properties as never, fields: { routingKey: 'q' } as never });
    assert.deepEqual(decodeRabbitMqMessage(msg({ type: 'T' })), { ok: false, message: 'the message has no message-id property' });
    assert.deepEqual(decodeRabbitMqMessage(msg({ messageId: 'x' })), { ok: false, message: 'the message has no type property' });
    assert.deepEqual(decodeRabbitMqMessage(msg({ messageId: 'x', type: 'T' }, '{')), { ok: false, message: 'the body is not valid JSON' });
    assert.match((decodeRabbitMqMessage(msg({ messageId: 'x', type: 'T' })) as { message: string }).message, /^id: "x" is not a UUID/);
    const bare = decodeRabbitMqMessage(msg({ messageId: event.id, type: 'T', timestamp: 1735787045 }));
    assert.ok(bare.ok);
    assert.equal(bare.event.destination, 'q');
    assert.equal(bare.event.version, null);
    assert.equal(bare.event.occurredAt.toISOString(), '2025-01-02T03:04:05.000Z');
  });
});
