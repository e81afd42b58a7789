/**
 * The bad-input catalogue: each mistake gets a clear error naming the field,
 * is caught before any SQL is sent, and leaves the caller's transaction
 * usable with what it already wrote.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  ConfigError,
  InvalidEventError,
  NotInTransactionError,
  PayloadTooLargeError,
  UnknownDestinationError,
  createOutbox,
  createRelay,
  defineEvent,
  payloadType,
  type NewEvent,
} from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore, pgConnection } from 'txbox/postgres';
import { HttpTransport } from 'txbox/http';
import { RecordingTransport } from 'txbox/testing';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<Record<string, unknown>>() });

describe('configuration errors', () => {
  it('rejects an invalid schema or table name, naming the field', () => {
    assert.throws(() => new PostgresOutboxStore({ schema: 'bad-name; DROP TABLE x' }), (e: unknown) => e instanceof ConfigError && e.field === 'schema');
    assert.throws(() => new PostgresOutboxStore({ table: '1outbox' }), (e: unknown) => e instanceof ConfigError && e.field === 'table' && /\(it starts with a digit\); use letters, digits and underscores/.test(e.message));
    assert.throws(
      () => new PostgresOutboxStore({ table: 'x'.repeat(47) }),
      (e: unknown) => e instanceof ConfigError && /\(it has 47 characters\).*at most 46 characters/.test(e.message) && !/\{0,62\}/.test(e.message),
    );
  });

  it('rejects a malformed webhook URL, naming the endpoint', () => {
    assert.throws(() => new HttpTransport({ endpoints: { orders: 'not a url' } }), (e: unknown) => e instanceof ConfigError && e.field === 'endpoints.orders');
    assert.throws(() => new HttpTransport({ endpoints: { orders: 'ftp://example.com/x' } }), (e: unknown) => e instanceof ConfigError && e.field === 'endpoints.orders');
    assert.throws(
      () => new HttpTransport({ endpoints: { orders: 'localhost:8089/hooks' } }),
      (e: unknown) => e instanceof ConfigError && e.field === 'endpoints.orders' && /has no scheme; write it as "http:\/\/localhost:8089\/\.\.\."/.test(e.message),
    );
  });

  it('rejects missing or invalid configuration', () => {
    assert.throws(() => createOutbox({} as never), (e: unknown) => e instanceof ConfigError && e.field === 'store');
    assert.throws(() => createOutbox({ store: new PostgresOutboxStore() }), (e: unknown) => e instanceof ConfigError && e.field === 'events');
    assert.throws(() => createOutbox({ store: new PostgresOutboxStore(), events: [OrderCreated], maxPayloadBytes: -1 }), (e: unknown) => e instanceof ConfigError && e.field === 'maxPayloadBytes');
    assert.throws(() => createOutbox({ store: new PostgresOutboxStore(), events: [OrderCreated], allowAutocommit: 'yes' as never }), (e: unknown) => e instanceof ConfigError && e.field === 'allowAutocommit');
    assert.throws(() => createRelay({ transport: new RecordingTransport() } as never), (e: unknown) => e instanceof ConfigError && e.field === 'store');
    assert.throws(() => pgConnection({ connectionString: 'mysql://x' }), (e: unknown) => e instanceof ConfigError && e.field === 'databaseUrl');
  });

  it('rejects bad relay options, naming the field', () => {
    const store = {} as never;
    const base = { store: { claim() {} } as never, transport: new RecordingTransport() };
    assert.throws(() => createRelay({ ...base, batchSize: 0 }), (e: unknown) => e instanceof ConfigError && e.field === 'batchSize');
    assert.throws(() => createRelay({ ...base, retry: { maxAttempts: 0 } }), (e: unknown) => e instanceof ConfigError && e.field === 'retry.maxAttempts');
    assert.throws(() => createRelay({ ...base, leaseTtlMs: 10 }), (e: unknown) => e instanceof ConfigError && e.field === 'leaseTtlMs');
    void store;
  });
});

for (const kind of BACKENDS) {
  describe(`enqueue bad input on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
      await db.query(`CREATE TABLE "${db.schema}".orders (id text PRIMARY KEY)`);
    });
    after(async () => {
      await db.close();
    });

    const cases: { name: string; event: () => NewEvent; check: (e: unknown) => boolean }[] = [
      {
        name: 'a payload with a bigint (not JSON-serializable)',
        event: () => OrderCreated({ aggregateId: 1, payload: { total: 10n } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload.total' && /bigint/.test(e.message),
      },
      {
        name: 'a payload with a cycle',
        event: () => {
          const p: Record<string, unknown> = {};
          p.self = p;
          return OrderCreated({ aggregateId: 1, payload: p });
        },
        check: (e) => e instanceof InvalidEventError && /cycle/.test(e.message),
      },
      {
        name: 'a payload with a Map (JSON would silently write {})',
        event: () => OrderCreated({ aggregateId: 1, payload: { lines: new Map([[1, 2]]) } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload.lines' && /Map/.test(e.message),
      },
      {
        name: 'a payload with NaN',
        event: () => OrderCreated({ aggregateId: 1, payload: { total: Number.NaN } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload.total',
      },
      {
        name: 'a payload over the maximum size (default 1 MiB)',
        event: () => OrderCreated({ aggregateId: 1, payload: { blob: 'x'.repeat(1024 * 1024) } }),
        check: (e) => e instanceof PayloadTooLargeError && e.limit === 1048576 && /maxPayloadBytes/.test(e.message),
      },
      {
        name: 'an unknown destination',
        event: () => ({ type: 'Shipped', aggregateType: 'Order', aggregateId: '1', destination: 'shipping', payload: {} }),
        check: (e) => e instanceof UnknownDestinationError && e.field === 'event.destination' && /"orders"/.test(e.message),
      },
      {
        name: 'an empty aggregate id',
        event: () => OrderCreated({ aggregateId: '', payload: {} }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.aggregateId',
      },
      {
        name: 'a null aggregate id',
        event: () => OrderCreated({ aggregateId: null as unknown as string, payload: {} }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.aggregateId' && /non-empty string or a finite number.*got null/.test(e.message),
      },
      {
        name: 'a non-UUID event id',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, id: 'order-1' }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.id' && /got "order-1"/.test(e.message),
      },
      {
        name: 'a non-string header',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { traceparent: 5 as unknown as string } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers.traceparent',
      },
      {
        name: 'a header value with a NUL character',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { traceparent: 'a\u0000b' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers.traceparent' && /NUL/.test(e.message),
      },
      {
        name: 'a header name with a NUL character',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { 'trace\u0000parent': 'x' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers' && /name/.test(e.message),
      },
      {
        name: 'an empty header name',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { '': 'x' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers' && /empty/.test(e.message),
      },
      {
        name: 'a header name with a space',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { 'trace parent': 'x' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers' && /visible ASCII/.test(e.message),
      },
      {
        name: 'a header value with a lone surrogate',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { note: 'a\ud800b' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers.note' && /surrogate/.test(e.message),
      },
      {
        name: 'a header value with a line break',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: { note: 'a\r\nX-Evil: 1' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers.note' && /control character/.test(e.message),
      },
      {
        name: 'a 5 MB header (headers count toward maxPayloadBytes)',
        event: () => OrderCreated({ aggregateId: 1, payload: { small: true }, headers: { big: 'x'.repeat(5 * 1024 * 1024) } }),
        check: (e) => e instanceof PayloadTooLargeError && e.field === 'event.headers' && e.limit === 1048576 && /headers/.test(e.message),
      },
      {
        name: 'more than 100 headers',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, headers: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`h${i}`, 'v'])) }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.headers' && /100/.test(e.message),
      },
      {
        name: 'a type with a lone surrogate',
        event: () => ({ type: 'Order\udc00Created', aggregateType: 'Order', aggregateId: '1', destination: 'orders', payload: {} }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.type' && /surrogate/.test(e.message),
      },
      {
        name: 'a key with a NUL character',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, key: 'k\u0000' }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.key' && /NUL/.test(e.message),
      },
      {
        name: 'an occurredAt in year 0 (a valid Date PostgreSQL refuses)',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, occurredAt: new Date('0000-06-01T00:00:00Z') }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.occurredAt' && /year/.test(e.message),
      },
      {
        name: 'an occurredAt in year 10000',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, occurredAt: new Date('+010000-01-01T00:00:00Z') }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.occurredAt' && /year/.test(e.message),
      },
      {
        name: 'a key of 1,000 three-byte characters (too large for the key index)',
        event: () => OrderCreated({ aggregateId: 1, payload: {}, key: '\u4e2d'.repeat(1000) }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.key' && /bytes/.test(e.message),
      },
      {
        name: 'a long aggregate id that makes the default key too long',
        event: () => OrderCreated({ aggregateId: '\u4e2d'.repeat(900), payload: {} }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.key' && /aggregateType:aggregateId/.test(e.message),
      },
      {
        name: 'a payload whose toJSON hides a NUL character',
        event: () => OrderCreated({ aggregateId: 1, payload: { a: { toJSON: () => 'x\u0000y' } } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload.a' && /NUL/.test(e.message),
      },
      {
        name: 'a payload whose toJSON returns undefined',
        event: () => OrderCreated({ aggregateId: 1, payload: { toJSON: () => undefined } as never }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload',
      },
      {
        name: 'a payload string with a lone surrogate',
        event: () => OrderCreated({ aggregateId: 1, payload: { note: 'a\ud800' } }),
        check: (e) => e instanceof InvalidEventError && e.field === 'event.payload.note' && /surrogate/.test(e.message),
      },
    ];

    for (const c of cases) {
      it(`rejects ${c.name} before any SQL, leaving the transaction usable`, async () => {
        const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
        const id = `order-${Math.random().toString(36).slice(2)}`;
        await db.transaction(async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".orders (id) VALUES ($1)`, [id]);
          await assert.rejects(outbox.enqueue(tx, c.event()), c.check);
          // Still usable: the business row and a valid event commit.
          await outbox.enqueue(tx, OrderCreated({ aggregateId: id, payload: { ok: true } }));
        });
        const rows = await db.query(`SELECT 1 FROM "${db.schema}".orders WHERE id = $1`, [id]);
        assert.equal(rows.length, 1, 'what was written before the bad call committed');
        const events = await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE aggregate_id = $1`, [id]);
        assert.equal(events.length, 1);
      });
    }

    it('counts a multi-byte payload in UTF-8 bytes when headers share the limit', async () => {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated], maxPayloadBytes: 1000 });
      // 325 three-byte characters (983 bytes of JSON, 333 characters) and a 600-byte header: about 1,590 bytes against 1,000.
      const event = OrderCreated({ aggregateId: 1, payload: { s: '\u4e2d'.repeat(325) }, headers: { note: 'x'.repeat(600) } });
      await db.transaction(async (tx) => {
        await assert.rejects(outbox.enqueue(tx, event), (e: unknown) => e instanceof PayloadTooLargeError && e.limit === 1000);
      });
    });

    it('refuses the connection itself instead of a transaction, writing nothing', async () => {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
      await assert.rejects(
        outbox.enqueue(db.connection, OrderCreated({ aggregateId: 'no-tx', payload: {} })),
        (e: unknown) => e instanceof NotInTransactionError && e.code === 'TXBOX_NOT_IN_TRANSACTION' && /begins transactions rather than being one/.test(e.message),
      );
      assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE aggregate_id = 'no-tx'`)).length, 0);
    });

    it('names the index of the bad event in a batch', async () => {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderCreated] });
      await db.transaction(async (tx) => {
        await assert.rejects(
          outbox.enqueue(tx, [OrderCreated({ aggregateId: 1, payload: {} }), OrderCreated({ aggregateId: 2, payload: { f: () => 1 } })]),
          (e: unknown) => e instanceof InvalidEventError && e.field === 'events[1].payload.f',
        );
      });
    });

    it('reports a missing schema with the command to run', async () => {
      const { assertMigrated, postgresNames } = await import('txbox/postgres');
      await assert.rejects(assertMigrated(db.connection, postgresNames({ schema: 'not_migrated_here' })), /run `txbox migrate`/);
    });
  });
}
