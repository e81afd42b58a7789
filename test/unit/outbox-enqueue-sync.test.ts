/**
 * `enqueue` sends its INSERT in the caller's turn of the event loop: no
 * await before it unless a schema validates asynchronously. That is what lets
 * postgres.js pipeline it with the statements started in the same turn
 * (test/integration/postgres-js.test.ts proves the pipelining on the wire).
 * Also: the payload walk that no longer builds a path per value still names
 * the bad value's path, and treats array holes and undefined items as before.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, defineEvent, InvalidEventError, payloadType, type SqlExecutor, type StandardSchemaV1 } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<unknown>() });

/** Records each statement's text, and whether it came before the caller's turn ended. */
function recorder(): { executor: SqlExecutor; statements: string[] } {
  const statements: string[] = [];
  return { statements, executor: { query: async (text: string) => (statements.push(text), { rows: [] }) } };
}

it('sends the INSERT synchronously, before enqueue returns, for one event and for several', async () => {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'sync_test', notify: false }), events: [Placed] });
  const { executor, statements } = recorder();
  const one = outbox.enqueue(executor, Placed({ aggregateId: 'a', payload: { n: 1 } }));
  assert.equal(statements.length, 1, 'the INSERT was sent in the caller turn (no await before it)');
  const many = outbox.enqueue(executor, [Placed({ aggregateId: 'a', payload: { n: 2 } }), Placed({ aggregateId: 'b', payload: { n: 3 } })]);
  assert.equal(statements.length, 2);
  assert.match(statements[0]!, /VALUES \(\$1::uuid/);
  assert.match(statements[1]!, /json_to_recordset/);
  assert.equal((await one).length, 1);
  assert.equal((await many).length, 2);
});

it('still awaits a schema that validates asynchronously, and still rejects (never throws) bad input', async () => {
  let validated = 0;
  const asyncSchema: StandardSchemaV1<{ n: number }> = {
    '~standard': {
      version: 1,
      vendor: 'test',
      validate: async (value: unknown) => {
        await new Promise((r) => setTimeout(r, 5));
        validated++;
        return typeof (value as { n?: unknown }).n === 'number' ? { value: value as { n: number } } : { issues: [{ message: 'n must be a number', path: ['n'] }] };
      },
    },
  };
  const Checked = defineEvent({ type: 'Checked', aggregateType: 'Order', destination: 'orders', schema: asyncSchema });
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'sync_test', notify: false }), events: [Checked, Placed] });
  const { executor, statements } = recorder();
  const ok = outbox.enqueue(executor, Checked({ aggregateId: 'a', payload: { n: 1 } }));
  assert.equal(statements.length, 0, 'nothing is sent before the asynchronous validation answered');
  await ok;
  assert.equal(statements.length, 1);
  assert.equal(validated, 1);
  // @ts-expect-error n must be a number
  const bad = outbox.enqueue(executor, Checked({ aggregateId: 'a', payload: { n: 'one' } }));
  await assert.rejects(bad, (e: unknown) => e instanceof InvalidEventError && e.field === 'event.payload.n');
  // A synchronous validation error is a rejected promise too, not a throw, and nothing is sent.
  const sync = outbox.enqueue(executor, Placed({ aggregateId: '', payload: {} }));
  assert.ok(sync instanceof Promise);
  await assert.rejects(sync, (e: unknown) => e instanceof InvalidEventError && e.field === 'event.aggregateId');
  assert.equal(statements.length, 1);
});

it('names the path of a bad payload value, keeps array holes as null and refuses undefined items', async () => {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'sync_test', notify: false }), events: [Placed] });
  const { executor } = recorder();
  const cases: [unknown, string, RegExp][] = [
    [{ lines: [{ sku: 'a' }, { sku: 'b\u0000' }] }, 'event.payload.lines[1].sku', /NUL/],
    [{ a: { b: [1, 2, Number.NaN] } }, 'event.payload.a.b[2]', /NaN is not representable/],
    [{ a: [1, undefined] }, 'event.payload.a[1]', /undefined is not representable/],
    [{ deep: { ['x\uD800']: 1 } }, 'event.payload.deep', /property name with a lone UTF-16 surrogate/],
    [{ s: 'half \uDC00 of it' }, 'event.payload.s', /lone UTF-16 surrogate/],
    [{ m: new Map() }, 'event.payload.m', /Map instance/],
    [{ n: 10n }, 'event.payload.n', /bigint/],
  ];
  for (const [payload, field, message] of cases) {
    await assert.rejects(outbox.enqueue(executor, Placed({ aggregateId: 'a', payload })), (e: unknown) => {
      assert.ok(e instanceof InvalidEventError, String(e));
      assert.equal(e.field, field);
      assert.match(e.message, message);
      return true;
    });
  }
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic.self = { back: cyclic };
  await assert.rejects(outbox.enqueue(executor, Placed({ aggregateId: 'a', payload: cyclic })), (e: unknown) => e instanceof InvalidEventError && e.field === 'event.payload.self.back' && /cycle/.test(e.message));
  // Paired surrogates (an emoji) and the same object twice (not a cycle) are fine; a hole is written as null.
  const shared = { x: 1 };
  const store = new PostgresOutboxStore({ schema: 'sync_test', notify: false });
  const sent: unknown[][] = [];
  const box = createOutbox({ store, events: [Placed] });
  // Text that looks like an escape of NUL or of a surrogate in the JSON (a backslash, then "u0000") is not one.
  const lookalike = 'C:\\u0000\\ud800 path';
  const at = new Date('2024-01-02T03:04:05.000Z');
  await box.enqueue(
    { query: async (_text: string, params?: unknown[]) => (sent.push(params ?? []), { rows: [] }) },
    Placed({ aggregateId: 'a', payload: { e: '😀', a: shared, b: shared, h: [1, , 3], lookalike, [lookalike]: 1, at } }),
  );
  assert.deepEqual(JSON.parse(sent[0]![6] as string), { e: '😀', a: { x: 1 }, b: { x: 1 }, h: [1, null, 3], lookalike, [lookalike]: 1, at: '2024-01-02T03:04:05.000Z' });
});
