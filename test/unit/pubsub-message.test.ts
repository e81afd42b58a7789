/**
 * The Pub/Sub codec, options and error classification without a server: an
 * event survives a round trip through data, ordering key and attributes;
 * what Pub/Sub would refuse is refused first, naming the limit; options name
 * the field; gRPC statuses map to retriable, permanent or destination-down.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, uuidv7, type OutboxEvent } from 'txbox';
import { buildPubSubMessage, parsePubSubMessage, PubSubConsumer, PubSubTransport, resolvePubSubTransportOptions } from 'txbox/pubsub';
import { OutstandingLimit } from '../../src/transports/pubsub/pubsub-flow-control.ts';
import { publishFailure } from '../../src/transports/pubsub/pubsub-outcomes.ts';

const event = (over: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: uuidv7(),
  type: 'OrderPlaced',
  aggregateType: 'Order',
  aggregateId: '42',
  key: 'Order:42',
  destination: 'orders',
  payload: { total: 12.5, items: ['a', 'ü'] },
  headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
  occurredAt: new Date('2026-11-24T10:00:00.123Z'),
  version: 7,
  ...over,
});

describe('Pub/Sub message codec', () => {
  it('round-trips an event: payload as data, key as ordering key, envelope and headers as attributes', () => {
    const e = event();
    const built = buildPubSubMessage(e);
    assert.ok(built.ok);
    assert.equal(built.message.orderingKey, 'Order:42');
    assert.equal(built.message.attributes['txbox-id'], e.id);
    assert.equal(built.message.attributes.traceparent, e.headers.traceparent);
    const parsed = parsePubSubMessage({ data: built.message.data, attributes: built.message.attributes, orderingKey: built.message.orderingKey });
    assert.ok(parsed.ok);
    assert.deepEqual({ ...parsed.event, payloadJson: undefined }, { ...e, payloadJson: undefined });
    // Published without an ordering key: the key comes from txbox-key.
    const unordered = parsePubSubMessage({ data: built.message.data, attributes: built.message.attributes, orderingKey: '' });
    assert.ok(unordered.ok && unordered.event.key === 'Order:42');
  });

  it('refuses what Pub/Sub would refuse, naming the limit and never the value', () => {
    const cases: [Partial<OutboxEvent>, RegExp][] = [
      [{ headers: { 'txbox-id': 'x' } }, /reserved: txbox-\* attributes are set by txbox/],
      [{ headers: { googTrace: 'x' } }, /names starting with "goog" are reserved/],
      [{ headers: { big: 'v'.repeat(1025) } }, /value of 1025 bytes; Pub\/Sub allows 1024/],
      [{ headers: Object.fromEntries(Array.from({ length: 95 }, (_, i) => [`h${i}`, 'x'])) }, /allows 100 attributes per message, txbox uses 9/],
      [{ key: 'k'.repeat(1025) }, /ordering key/],
      [{ payload: { blob: 'x'.repeat(10_000_000) } }, /too large: \d+ bytes; Pub\/Sub accepts at most 10000000/],
    ];
    for (const [over, reason] of cases) {
      const built = buildPubSubMessage(event(over));
      assert.ok(!built.ok);
      assert.match(built.reason, reason);
      assert.doesNotMatch(built.reason, /vvvv|xxxx/);
    }
  });

  it('reads foreign messages as unreadable, naming the attribute', () => {
    assert.deepEqual(parsePubSubMessage({ data: Buffer.from('{}'), attributes: {} }), { ok: false, message: 'the message has no "txbox-id" attribute' });
    const r = parsePubSubMessage({ data: Buffer.from('not json'), attributes: { 'txbox-id': uuidv7(), 'txbox-type': 'T' } });
    assert.deepEqual(r, { ok: false, message: 'the data is not valid JSON' });
  });
});

describe('Pub/Sub options and errors', () => {
  it('names the field and the fix', () => {
    const cases: [() => unknown, string][] = [
      [() => new PubSubTransport({} as never), 'projectId'],
      [() => new PubSubTransport({ projectId: 'shop', emulatorHost: 'nohost' }), 'emulatorHost'],
      [() => new PubSubTransport({ projectId: 'shop', topics: { orders: 'x' } }), 'topics.orders'],
      [() => new PubSubTransport({ projectId: 'shop', batching: { maxMessages: 5000 } }), 'batching.maxMessages'],
      [() => new PubSubTransport({ projectId: 'shop', client: {} as never }), 'projectId'],
      [() => new PubSubConsumer({ projectId: 'shop', subscription: 'subs-1' } as never), 'inbox'],
      [() => new PubSubConsumer({ projectId: 'shop', subscription: 'goog-sub', inbox: { process() {} } as never }), 'subscription'],
      [() => new PubSubConsumer({ projectId: 'shop', subscription: 'subs-1', inbox: { process() {} } as never, deadLetterTopic: '1x' }), 'deadLetterTopic'],
    ];
    for (const [make, field] of cases) {
      assert.throws(make, (err: unknown) => err instanceof ConfigError && err.field === field, field);
    }
    const o = resolvePubSubTransportOptions({ projectId: 'shop', emulatorHost: '127.0.0.1:8085' });
    assert.deepEqual([o.messageOrdering, o.batching.maxMessages, o.connection.display], [true, 1000, 'the emulator at 127.0.0.1:8085']);
  });

  it('classifies gRPC statuses', () => {
    const err = (code: number, message: string) => Object.assign(new Error(message), { code });
    assert.equal(publishFailure(err(14, '14 UNAVAILABLE: no connection'), 't', 'd').kind, 'destination-down');
    assert.equal(publishFailure(err(4, '4 DEADLINE_EXCEEDED'), 't', 'd').kind, 'destination-down');
    assert.equal(publishFailure(err(8, '8 RESOURCE_EXHAUSTED'), 't', 'd').kind, 'retriable');
    const missing = publishFailure(err(5, '5 NOT_FOUND: Topic not found'), 'shop-orders', 'orders');
    assert.equal(missing.kind, 'permanent');
    assert.match(missing.message, /topic shop-orders \(destination orders\).*does not exist/);
    assert.equal(publishFailure(err(3, '3 INVALID_ARGUMENT'), 't', 'd').kind, 'permanent');
    assert.equal(publishFailure(err(7, '7 PERMISSION_DENIED'), 't', 'd').kind, 'destination-down');
    assert.equal(publishFailure(new Error('something odd'), 't', 'd').kind, 'retriable');
  });
});

describe('Pub/Sub publisher flow control', () => {
  it('waits beyond maxMessages or maxBytes until a publish is acked; an aborted wait gives up; an oversize message goes alone', async () => {
    const limit = new OutstandingLimit(2, 100);
    const signal = new AbortController().signal;
    assert.equal(await limit.acquire(10, signal), true);
    assert.equal(await limit.acquire(10, signal), true);
    let third = false;
    const waiting = limit.acquire(10, signal).then((ok) => (third = ok));
    await new Promise((r) => setImmediate(r));
    assert.equal(third, false, 'the third waits for room');
    limit.release(10);
    await waiting;
    assert.equal(third, true);
    const abort = new AbortController();
    const gaveUp = limit.acquire(90, abort.signal);
    abort.abort();
    assert.equal(await gaveUp, false);
    limit.release(10);
    limit.release(10);
    assert.equal(await limit.acquire(500, signal), true, 'larger than maxBytes: goes when nothing else is outstanding');
  });
});
