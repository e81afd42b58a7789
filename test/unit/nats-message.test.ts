/**
 * buildMessage's header block against nats.js's own encoder: the same headers
 * appended to a MsgHdrs in the same order must encode to the very bytes
 * buildMessage builds by hand, and nats.js's parser must read them back.
 * NatsTransport sends the block as it is (encodedHeaders).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { MsgHdrsImpl, headers as natsHeaders } from '@nats-io/transport-node';
import type { OutboxEvent } from 'txbox';
import { buildMessage, encodedHeaders } from '../../src/transports/nats/nats-message.ts';

function event(over: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: '0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b',
    type: 'OrderPlaced',
    aggregateType: 'Order',
    aggregateId: 'o-1',
    key: 'Order:o-1',
    destination: 'orders',
    payload: { total: 12.5, note: 'é ✓' },
    headers: {},
    occurredAt: new Date('2026-11-28T09:00:00.123Z'),
    version: 7,
    ...over,
  };
}

/** The block nats.js makes of the headers buildMessage sends, in its order. */
function natsEncoded(e: OutboxEvent, stream: string | null): Uint8Array {
  const h = natsHeaders() as MsgHdrsImpl;
  h.append('Nats-Msg-Id', e.id);
  if (stream !== null) h.append('Nats-Expected-Stream', stream);
  let contentType = 'application/json';
  for (const [name, value] of Object.entries(e.headers ?? {})) {
    if (name.toLowerCase() === 'content-type') contentType = value;
    else h.append(name, value);
  }
  h.append('txbox-type', e.type);
  h.append('txbox-destination', e.destination);
  h.append('txbox-key', e.key);
  h.append('txbox-aggregate-type', e.aggregateType);
  h.append('txbox-aggregate-id', e.aggregateId);
  h.append('txbox-occurred-at', e.occurredAt.toISOString());
  h.append('content-type', contentType);
  if (e.version !== null && e.version !== undefined) h.append('txbox-version', String(e.version));
  return h.encode();
}

it('builds the bytes nats.js encodes for the same headers, and nats.js reads them back', () => {
  const cases: [OutboxEvent, string | null][] = [
    [event(), null],
    [event(), 'ORDERS'],
    [event({ version: null, headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', baggage: 'k=v ✓' } }), 'ORDERS'],
    [event({ headers: { 'Content-Type': 'application/vnd.order+json', 'x-a': '1', 'X-A': '2' } }), null],
    [event({ key: 'tenant a.b', aggregateId: 'ü/ß  x' }), null],
  ];
  for (const [e, stream] of cases) {
    const built = buildMessage(e, stream);
    assert.ok(built.ok, built.ok ? '' : built.reason);
    assert.deepEqual(Buffer.from(built.message.headers), Buffer.from(natsEncoded(e, stream)));
    assert.equal(built.message.bytes, built.message.body.length + built.message.headers.length);
    assert.equal((encodedHeaders(built.message.headers) as MsgHdrsImpl).encode(), built.message.headers, 'sent as built');
    const read = MsgHdrsImpl.decode(built.message.headers);
    assert.equal(read.get('Nats-Msg-Id'), e.id);
    assert.equal(read.get('txbox-key'), e.key);
  }
});

it('matches nats.js for any header name and value it accepts unchanged', () => {
  const name = fc.stringMatching(/^[!-9;-~]{1,20}$/).filter((n) => !/^(nats-|txbox-)/i.test(n) && n.toLowerCase() !== 'content-type');
  // Values nats.js keeps as they are: no CR or LF, no leading or trailing whitespace (buildMessage refuses the rest).
  const value = fc.string({ unit: 'grapheme', maxLength: 30 }).filter((v) => !/[\r\n]/.test(v) && v.trim() === v);
  fc.assert(
    fc.property(fc.dictionary(name, value, { maxKeys: 6 }), value.filter((v) => v.length > 0), (headers, key) => {
      const e = event({ headers, key });
      const built = buildMessage(e, 'S');
      assert.ok(built.ok, built.ok ? '' : built.reason);
      assert.deepEqual(Buffer.from(built.message.headers), Buffer.from(natsEncoded(e, 'S')));
    }),
    { numRuns: 300 },
  );
});
