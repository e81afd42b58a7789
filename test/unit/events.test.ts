import { it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { createOutbox, defineEvent, InvalidEventError, payloadType, uuidv7, type OutboxStore, type PreparedEvent } from 'txbox';
import { checkDeliveries } from 'txbox/testing';

/** A pure in-memory store: these tests are about the core's validation, not SQL. */
class MemoryStore implements OutboxStore {
  readonly rows: PreparedEvent[] = [];
  async insert(_executor: unknown, events: readonly PreparedEvent[]): Promise<void> {
    this.rows.push(...events);
  }
}
const tx = { query: async () => ({ rows: [] }) };

it('infers payload types from a Standard Schema and validates at enqueue', async () => {
  const OrderCreated = defineEvent({
    type: 'OrderCreated',
    aggregateType: 'Order',
    destination: 'orders',
    schema: z.object({ orderId: z.string(), total: z.number().positive(), note: z.string().default('none') }),
  });
  const store = new MemoryStore();
  const outbox = createOutbox({ store, events: [OrderCreated] });
  await outbox.enqueue(tx, OrderCreated({ aggregateId: 'o1', payload: { orderId: 'o1', total: 5 } }));
  // @ts-expect-error total must be a number: the payload type is inferred from the schema
  const bad = OrderCreated({ aggregateId: 'o1', payload: { orderId: 'o1', total: 'five' } });
  await assert.rejects(outbox.enqueue(tx, bad), (e: unknown) => e instanceof InvalidEventError && e.field === 'event.payload.total' && /OrderCreated schema validation/.test(e.message));
  assert.equal(store.rows.length, 1);
  assert.deepEqual(JSON.parse(store.rows[0]!.payloadJson), { orderId: 'o1', total: 5, note: 'none' }, 'the schema output (with defaults) is stored');
  assert.equal(store.rows[0]!.key, 'Order:o1');
  assert.equal(OrderCreated.is({ type: 'OrderCreated' }), true);
});

it('types payloads without a runtime schema through payloadType', async () => {
  const Paid = defineEvent({ type: 'OrderPaid', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ amount: number }>() });
  const store = new MemoryStore();
  const outbox = createOutbox({ store, events: [Paid] });
  // @ts-expect-error amount must be a number
  Paid({ aggregateId: 1, payload: { amount: '1' } });
  await outbox.enqueue(tx, Paid({ aggregateId: 7, payload: { amount: 1 }, key: 'custom', version: 3, headers: { traceparent: '00-abc' } }));
  const row = store.rows[0]!;
  assert.equal(row.aggregateId, '7');
  assert.equal(row.key, 'custom');
  assert.equal(row.version, 3);
  assert.deepEqual(row.headers, { traceparent: '00-abc' });
});

it('makes time-ordered, unique UUIDv7 ids', () => {
  const ids = Array.from({ length: 10_000 }, () => uuidv7());
  assert.equal(new Set(ids).size, ids.length);
  assert.deepEqual([...ids].sort(), ids, 'ids made in sequence sort in sequence');
  for (const id of ids.slice(0, 10)) assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const t = Date.now() + 5; // ids never go backwards, so take a time after the ones above
  assert.equal(parseInt(uuidv7(t).replace(/-/g, '').slice(0, 12), 16), t);
});

it('checkDeliveries counts loss, phantoms, duplicates and order violations', () => {
  const committed = new Map([['k', ['a', 'b', 'c']]]);
  assert.deepEqual(
    checkDeliveries(committed, [
      { id: 'a', key: 'k' },
      { id: 'c', key: 'k' },
      { id: 'b', key: 'k' },
      { id: 'a', key: 'k' },
      { id: 'x', key: 'k' },
    ]),
    { committed: 3, delivered: 3, lost: 0, phantom: 1, duplicates: 1, orderViolations: 2 },
  );
});
