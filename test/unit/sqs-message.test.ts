/**
 * The SQS/SNS message form (pure): the envelope in attributes within SQS's
 * limit of 10, headers that do not fit or cannot be attribute names in
 * txbox-headers, characters SQS refuses escaped, the group id of keys SQS
 * would refuse, and decoding back to the same event.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { uuidv7, type OutboxEvent } from 'txbox';
import { decodeSqsMessage, encodeSqsMessage, messageGroupId, SQS_ATTRIBUTES } from 'txbox/sqs';
import { inboundEventProblem } from '../../src/core/inbound-event.ts';

const base = (over: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: uuidv7(),
  type: 'OrderCreated',
  aggregateType: 'Order',
  aggregateId: '42',
  key: 'Order:42',
  destination: 'orders',
  payload: { total: 10 },
  headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
  occurredAt: new Date('2026-01-02T03:04:05.678Z'),
  version: 3,
  ...over,
});

function roundTrip(event: OutboxEvent, fifo = true): OutboxEvent {
  const m = encodeSqsMessage(event, fifo);
  const decoded = decodeSqsMessage({ MessageId: 'm1', Body: m.body, MessageAttributes: m.attributes }, 'fallback');
  assert.ok(decoded.ok, decoded.ok ? '' : decoded.message);
  return decoded.event;
}

describe('SQS message form', () => {
  it('puts the payload in the body, the envelope and headers in attributes, and decodes the same event', () => {
    const e = base();
    const m = encodeSqsMessage(e, true);
    assert.equal(m.body, '{"total":10}');
    assert.deepEqual(Object.keys(m.attributes).sort(), ['traceparent', SQS_ATTRIBUTES.envelope].sort());
    assert.equal(m.groupId, 'Order:42');
    assert.equal(m.deduplicationId, e.id);
    const back = roundTrip(e);
    assert.deepEqual({ ...back, payload: back.payload }, { ...e });
  });

  it('a standard queue gets no group or deduplication id', () => {
    const m = encodeSqsMessage(base(), false);
    assert.equal(m.groupId, undefined);
    assert.equal(m.deduplicationId, undefined);
  });

  it('keeps at most 10 attributes: headers beyond the limit, and names SQS refuses, travel in txbox-headers', () => {
    const headers: Record<string, string> = { 'bad name': 'x', 'AWS.reserved': 'y', 'a..b': 'z' };
    for (let i = 0; i < 12; i++) headers[`h${i}`] = `v${i}`;
    const e = base({ headers });
    const m = encodeSqsMessage(e, true);
    assert.equal(Object.keys(m.attributes).length, 10);
    assert.ok(m.attributes[SQS_ATTRIBUTES.headers]);
    assert.deepEqual(roundTrip(e).headers, headers);
  });

  it('escapes characters SQS refuses (U+FFFE, U+FFFF, control characters) and keeps the values', () => {
    const e = base({ key: 'k\u0001\uFFFE', type: 'T\uFFFF', payload: { s: 'a\uFFFFb\u0002' }, headers: { note: 'x\uFFFEy' } });
    const m = encodeSqsMessage(e, true);
    const unsafe = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/;
    assert.doesNotMatch(m.body, unsafe);
    for (const a of Object.values(m.attributes)) assert.doesNotMatch(a.StringValue, unsafe);
    const back = roundTrip(e);
    assert.equal(back.key, e.key);
    assert.equal(back.type, e.type);
    assert.deepEqual(back.payload, e.payload);
    assert.deepEqual(back.headers, e.headers);
  });

  it('a key SQS would refuse as a group id becomes a stable hash; one it takes stays as it is', () => {
    assert.equal(messageGroupId('Order:42'), 'Order:42');
    const long = 'x'.repeat(200);
    assert.match(messageGroupId(long), /^txbox-[A-Za-z0-9_-]{43}$/);
    assert.equal(messageGroupId(long), messageGroupId(long));
    assert.notEqual(messageGroupId('a b'), messageGroupId('a  b'));
    assert.match(messageGroupId('ключ'), /^txbox-/);
  });

  it('counts the size as SQS does: body plus attribute names, types and values in UTF-8', () => {
    const m = encodeSqsMessage(base({ payload: { s: 'é' }, headers: {} }), false);
    let expected = Buffer.byteLength(m.body);
    for (const [k, v] of Object.entries(m.attributes)) expected += Buffer.byteLength(k) + 6 + Buffer.byteLength(v.StringValue);
    assert.equal(m.bytes, expected);
  });

  it('refuses a txbox-* event header (txbox sets those)', () => {
    assert.throws(() => encodeSqsMessage(base({ headers: { 'txbox-envelope': 'x' } }), true), /headers\.txbox-envelope: .*reserved/);
  });

  it('decoding names the missing or bad field', () => {
    const good = encodeSqsMessage(base(), true);
    const cases: [Parameters<typeof decodeSqsMessage>[0], RegExp][] = [
      [{ Body: '{}' }, /no txbox-envelope attribute/],
      [{ Body: '{}', MessageAttributes: { [SQS_ATTRIBUTES.envelope]: { DataType: 'String', StringValue: 'nope' } } }, /not valid JSON/],
      [{ Body: '{}', MessageAttributes: { [SQS_ATTRIBUTES.envelope]: { DataType: 'String', StringValue: '{"id":"x"}' } } }, /no string type/],
      [{ Body: 'not json', MessageAttributes: good.attributes }, /body is not valid JSON/],
      [{ Body: '{}', MessageAttributes: { ...good.attributes, [SQS_ATTRIBUTES.headers]: { DataType: 'String', StringValue: '[1]' } } }, /txbox-headers attribute must be a JSON object/],
    ];
    for (const [message, expected] of cases) {
      const decoded = decodeSqsMessage(message, 'd');
      assert.equal(decoded.ok, false);
      assert.match(decoded.ok ? '' : decoded.message, expected);
    }
  });

  it('the body is searched for an escaped NUL before the payload is walked: a payload PostgreSQL cannot hold is refused, naming its path; a clean one passes', () => {
    const bad = encodeSqsMessage(base({ payload: { lines: [{ note: 'a\u0000b' }] } }), true);
    const refused = decodeSqsMessage({ Body: bad.body, MessageAttributes: bad.attributes }, 'd');
    assert.equal(refused.ok, false);
    assert.match(refused.ok ? '' : refused.message, /^payload\.lines\[0\]\.note: contains "\\u0000"/);
    const good = encodeSqsMessage(base({ payload: { note: 'u0000 as plain text is fine' } }), true);
    const decoded = decodeSqsMessage({ Body: good.body, MessageAttributes: good.attributes }, 'd');
    assert.equal(decoded.ok, true);
    assert.equal(inboundEventProblem(decoded.ok ? decoded.event : base()), null);
  });
});
