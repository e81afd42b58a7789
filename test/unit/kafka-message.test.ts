/** The Kafka message of an event (key, value, headers, size) and its reading back. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OutboxEvent } from 'txbox';
import { KAFKA_HEADER, parseKafkaMessage } from 'txbox/kafka';
import { buildKafkaRecord } from '../../src/transports/kafka/kafka-message.ts';

function event(overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: '0190a0b0-1111-7000-8000-000000000001',
    type: 'OrderPlaced',
    aggregateType: 'Order',
    aggregateId: '42',
    key: 'Order:42',
    destination: 'orders',
    payload: { total: 12.5, lines: ['a', 'b'], note: 'héllo' },
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'a=b' },
    occurredAt: new Date('2026-01-02T03:04:05.678Z'),
    version: 7,
    ...overrides,
  };
}

function built(e: OutboxEvent) {
  const r = buildKafkaRecord(e, 'shop.orders');
  assert.ok(r.ok, r.ok ? '' : r.reason);
  return r.record;
}

describe('buildKafkaRecord', () => {
  it('key = event key, value = JSON payload, envelope and trace context in headers', () => {
    const r = built(event());
    assert.equal(r.topic, 'shop.orders');
    assert.equal(r.key.toString(), 'Order:42');
    assert.deepEqual(JSON.parse(r.value.toString()), event().payload);
    const h = Object.fromEntries(Object.entries(r.headers).map(([k, v]) => [k, v.toString()]));
    assert.deepEqual(h, {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tracestate: 'a=b',
      'txbox-id': '0190a0b0-1111-7000-8000-000000000001',
      'txbox-type': 'OrderPlaced',
      'txbox-aggregate-type': 'Order',
      'txbox-aggregate-id': '42',
      'txbox-version': '7',
      'txbox-occurred-at': '2026-01-02T03:04:05.678Z',
      'txbox-destination': 'orders',
      'content-type': 'application/json',
    });
  });

  it('leaves out a null version; an event content-type replaces the default', () => {
    const r = built(event({ version: null, headers: { 'Content-Type': 'application/cloudevents+json' } }));
    assert.equal(r.headers[KAFKA_HEADER.version], undefined);
    assert.equal(r.headers['content-type']?.toString(), 'application/cloudevents+json');
    assert.equal(r.headers['Content-Type'], undefined);
  });

  it('counts an upper bound of the bytes on the wire', () => {
    const r = built(event());
    let exact = r.key.length + r.value.length;
    for (const [k, v] of Object.entries(r.headers)) exact += Buffer.byteLength(k) + v.length;
    assert.ok(r.bytes > exact + 61, 'includes the batch header and record framing');
    assert.ok(r.bytes < exact + 300);
  });

  it('refuses what cannot travel, without quoting values', () => {
    const cases: [Partial<OutboxEvent>, RegExp][] = [
      [{ headers: { 'txbox-id': 'spoofed' } }, /reserved/],
      [{ headers: { 'TXBOX-Type': 'x' } }, /reserved/],
      [{ headers: { traceparent: 42 as unknown as string } }, /must be a string/],
      [{ payload: { n: 10n } }, /cannot be serialized to JSON/],
    ];
    for (const [overrides, reason] of cases) {
      const r = buildKafkaRecord(event(overrides), 't');
      assert.ok(!r.ok);
      assert.match(r.reason, reason);
      assert.doesNotMatch(r.reason, /spoofed/);
    }
  });
});

describe('parseKafkaMessage', () => {
  it('reads back exactly the event that was sent', () => {
    for (const e of [event(), event({ version: null, payload: null, headers: {} }), event({ headers: { 'content-type': 'text/plain', baggage: 'k=v' } })]) {
      const r = built(e);
      const parsed = parseKafkaMessage({ key: r.key, value: r.value, headers: r.headers }, 'orders');
      assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
      assert.deepEqual(parsed.event, e);
    }
  });

  const I1 = '0190a8f0-0000-7000-8000-000000000001';
  const I2 = '0190a8f0-0000-7000-8000-000000000002';

  it('takes string headers and arrays (as some clients give them)', () => {
    const parsed = parseKafkaMessage({ key: 'k', value: '{"a":1}', headers: { 'txbox-id': [I1, I2], 'txbox-type': 'T' } }, 'd');
    assert.ok(parsed.ok);
    assert.equal(parsed.event.id, I1);
    assert.equal(parsed.event.key, 'k');
    assert.deepEqual(parsed.event.payload, { a: 1 });
    assert.equal(parsed.event.version, null);
    assert.equal(parsed.event.destination, 'd', 'without txbox-destination, the name the consumer gave');
    const named = parseKafkaMessage({ key: 'k', value: '1', headers: { 'txbox-id': I1, 'txbox-type': 'T', 'txbox-destination': 'payments' } }, 'shop.orders');
    assert.ok(named.ok);
    assert.equal(named.event.destination, 'payments');
  });

  it('takes a header with a null value (Java producers send them; kafkajs decodes them as null) as absent, without throwing', () => {
    const parsed = parseKafkaMessage({ key: 'k', value: '1', headers: { 'txbox-id': I1, 'txbox-type': 'T', 'x-null': null, 'x-list': [null, 'b'] } } as never, 'd');
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.event.headers, { 'x-list': 'b' });
    const nullFirst = parseKafkaMessage({ key: 'k', value: '1', headers: { 'txbox-id': [null, I1], 'txbox-type': 'T' } } as never, 'd');
    assert.ok(nullFirst.ok, 'the first value that is there');
    assert.equal(nullFirst.event.id, I1);
    const nullType = parseKafkaMessage({ key: 'k', value: '1', headers: { 'txbox-id': I1, 'txbox-type': null } } as never, 'd');
    assert.ok(!nullType.ok);
    assert.match(nullType.message, /txbox-type/);
  });

  it('says what is wrong, naming the header, never its value', () => {
    const cases: [object, RegExp][] = [
      [{ key: null, value: '{}', headers: { 'txbox-type': 'T' } }, /txbox-id/],
      [{ key: null, value: '{}', headers: { 'txbox-id': 'i' } }, /txbox-type/],
      [{ key: null, value: 'not json {', headers: { 'txbox-id': 'i', 'txbox-type': 'T' } }, /not valid JSON/],
      [{ key: null, value: '1', headers: { 'txbox-id': 'i', 'txbox-type': 'T', 'txbox-version': 'v9' } }, /txbox-version/],
      [{ key: null, value: '1', headers: { 'txbox-id': 'i', 'txbox-type': 'T', 'txbox-occurred-at': 'yesterday' } }, /txbox-occurred-at/],
      // What the inbox could never store: named by field, rejected before any store sees it.
      [{ key: null, value: '1', headers: { 'txbox-id': 'order-17', 'txbox-type': 'T' } }, /^id: "order-17" is not a UUID/],
      [{ key: 'k\u0000', value: '1', headers: { 'txbox-id': I1, 'txbox-type': 'T' } }, /^key: contains a NUL/],
      [{ key: 'k', value: '{"note":"\\u0000"}', headers: { 'txbox-id': I1, 'txbox-type': 'T' } }, /^payload\.note: contains/],
    ];
    for (const [message, expected] of cases) {
      const parsed = parseKafkaMessage(message as never);
      assert.ok(!parsed.ok);
      assert.match(parsed.message, expected);
      assert.doesNotMatch(parsed.message, /v9|yesterday/);
    }
  });
});
