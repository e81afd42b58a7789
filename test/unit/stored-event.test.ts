/**
 * The events the stores' claims build (`storedEvent`, used by the PostgreSQL,
 * MySQL and Firestore relay stores): `payload` is parsed from `payloadJson`
 * on the first read only, yet behaves as an own enumerable property (spread,
 * JSON.stringify, Object.keys, a copy through its property descriptors), and
 * the object stays a fast-properties object in V8: the claim builds one per
 * event, and the object literal with a getter of its own that it replaced was
 * a dictionary-mode object of about 1.1 KB, slower on every property read.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { storedEvent, type StoredEventFields } from '../../src/core/envelope.ts';

const fields = (over: Partial<StoredEventFields> = {}): StoredEventFields => ({
  seq: 7,
  id: '0190a8a0-0000-7000-8000-000000000001',
  type: 'OrderCreated',
  aggregateType: 'Order',
  aggregateId: '42',
  key: 'Order:42',
  bucket: 3,
  destination: 'orders',
  payloadJson: '{"total":12,"items":[1,2]}',
  headers: { traceparent: 'x' },
  occurredAt: new Date(1_700_000_000_000),
  version: 2,
  attempts: 0,
  routesDone: [],
  createdAtMs: 1_700_000_000_123,
  ...over,
});

const KEYS = ['seq', 'id', 'type', 'aggregateType', 'aggregateId', 'key', 'bucket', 'destination', 'payloadJson', 'payload', 'headers', 'occurredAt', 'version', 'attempts', 'routesDone'];

it('payload is parsed on first read, once, and reads like an own property', () => {
  const e = storedEvent(fields());
  assert.deepEqual(Object.keys(e), [...KEYS, 'createdAtMs']);
  const first = e.payload;
  assert.deepEqual(first, { total: 12, items: [1, 2] });
  assert.equal(e.payload, first, 'the same parsed value on every read');
  const spread = { ...e };
  assert.deepEqual(spread.payload, { total: 12, items: [1, 2] });
  assert.deepEqual(Object.keys(spread), [...KEYS, 'createdAtMs'], 'nothing hidden is copied by a spread');
  assert.deepEqual(JSON.parse(JSON.stringify(e)).payload, { total: 12, items: [1, 2] });
  assert.equal(e.createdAtMs, 1_700_000_000_123);
});

it('a payload that is not JSON fails only when read, and every field is still there', () => {
  const e = storedEvent(fields({ payloadJson: '{not json' }));
  assert.equal(e.payloadJson, '{not json');
  assert.equal(e.key, 'Order:42');
  assert.throws(() => e.payload, SyntaxError);
});

it('a payload that parses to null or false is kept, not parsed again', () => {
  for (const [json, value] of [['null', null], ['false', false], ['0', 0], ['""', '']] as const) {
    const e = storedEvent(fields({ payloadJson: json }));
    assert.equal(e.payload, value);
    assert.equal(e.payload, value);
  }
});

it('without createdAtMs the event has no such property', () => {
  const e = storedEvent(fields({ createdAtMs: undefined }));
  assert.equal('createdAtMs' in e, false);
  assert.deepEqual(Object.keys(e), KEYS);
});

it('a copy through its property descriptors (as the relay tracing makes one with other headers) parses on its own', () => {
  const e = storedEvent(fields());
  const copy = Object.defineProperties({}, Object.getOwnPropertyDescriptors(e)) as typeof e;
  Object.defineProperty(copy, 'headers', { value: { other: 'y' }, enumerable: true, writable: true, configurable: true });
  assert.deepEqual(copy.payload, { total: 12, items: [1, 2] });
  assert.deepEqual(e.headers, { traceparent: 'x' });
  assert.deepEqual(e.payload, { total: 12, items: [1, 2] });
});

it('a frozen event, and a copy of its string-keyed properties only, still read their payload', () => {
  const frozen = Object.freeze(storedEvent(fields()));
  assert.deepEqual(frozen.payload, { total: 12, items: [1, 2] });
  assert.deepEqual(frozen.payload, { total: 12, items: [1, 2] });
  const e = storedEvent(fields());
  const copy = {} as typeof e;
  for (const name of Object.keys(e)) Object.defineProperty(copy, name, Object.getOwnPropertyDescriptor(e, name)!);
  assert.deepEqual(copy.payload, { total: 12, items: [1, 2] });
  assert.deepEqual(Object.keys(copy), Object.keys(e));
});

it("the PostgreSQL store's claimed events are fast-properties objects in V8", () => {
  // %HasFastProperties needs --allow-natives-syntax: a child process of its own.
  const script = `
    const { rowToEvent } = await import(${JSON.stringify(fileURLToPath(new URL('../../src/stores/postgres/postgres-relay-store.ts', import.meta.url)))});
    const fast = new Function('o', 'return %HasFastProperties(o)');
    const row = (created_ms) => ({ seq: '1', id: 'a', type: 't', aggregate_type: 'x', aggregate_id: 'y', key: 'k', bucket: 1, destination: 'd',
      payload: '{"a":1}', headers: {}, occurred_ms: 1, version: null, attempts: 0, routes_done: null, created_ms });
    const events = [rowToEvent(row(5)), rowToEvent(row(null))];
    const read = events.map((e) => e.payload);
    console.log(JSON.stringify({ fast: events.map(fast), read }));`;
  const out = execFileSync(process.execPath, ['--allow-natives-syntax', '--conditions=txbox-source', '--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out.trim().split('\n').pop()!), { fast: [true, true], read: [{ a: 1 }, { a: 1 }] });
});
