/**
 * The executor seam with the app's own client or ORM transaction: pg, PGlite,
 * Kysely, Knex and Drizzle, plus the unit-of-work helper with aggregates
 * that collect domain events (the Order and Contact examples).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import knexFactory from 'knex';
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import { createOutbox, defineEvent, DomainEvents, fromDrizzle, fromKnex, fromKysely, fromPg, payloadType, UnitOfWork } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';

const ContactCreated = defineEvent({ type: 'ContactCreated', aggregateType: 'Contact', destination: 'contacts', payload: payloadType<{ email: string }>() });
const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ total: number }>() });
const OrderCancelled = defineEvent({ type: 'OrderCancelled', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ reason: string }>() });

let db: TestDb;
let pool: pg.Pool;
let outbox: ReturnType<typeof createOutbox>;

before(async () => {
  db = await openDb('postgres');
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  await pool.query(`CREATE TABLE "${db.schema}".contacts (id text PRIMARY KEY, email text NOT NULL)`);
  outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [ContactCreated, OrderPlaced, OrderCancelled] });
});
after(async () => {
  await pool.end();
  await db.close();
});

async function count(aggregateId: string): Promise<number> {
  const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE aggregate_id = $1`, [aggregateId]);
  return rows[0]!.n;
}

it('pg PoolClient: commit keeps both, rollback keeps neither', async () => {
  for (const outcome of ['COMMIT', 'ROLLBACK']) {
    const client = await pool.connect();
    const id = `pg-${outcome}`;
    await client.query('BEGIN');
    await client.query(`INSERT INTO "${db.schema}".contacts VALUES ($1, 'a@b.c')`, [id]);
    await outbox.enqueue(fromPg(client), ContactCreated({ aggregateId: id, payload: { email: 'a@b.c' } }));
    await client.query(outcome);
    client.release();
    assert.equal(await count(id), outcome === 'COMMIT' ? 1 : 0);
  }
});

it('Kysely transaction', async () => {
  const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: DATABASE_URL, max: 2 }) }) });
  try {
    await kysely.transaction().execute(async (trx) => {
      await trx.executeQuery(CompiledQuery.raw(`INSERT INTO "${db.schema}".contacts VALUES ('kysely', 'k@b.c')`));
      await outbox.enqueue(fromKysely(trx, CompiledQuery), ContactCreated({ aggregateId: 'kysely', payload: { email: 'k@b.c' } }));
    });
    await assert.rejects(
      kysely.transaction().execute(async (trx) => {
        await outbox.enqueue(fromKysely(trx, CompiledQuery), ContactCreated({ aggregateId: 'kysely-rb', payload: { email: 'k@b.c' } }));
        throw new Error('rollback');
      }),
    );
  } finally {
    await kysely.destroy();
  }
  assert.equal(await count('kysely'), 1);
  assert.equal(await count('kysely-rb'), 0);
});

it('Knex transaction', async () => {
  const knex = knexFactory({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
  try {
    await knex.transaction(async (trx) => {
      await trx.raw(`INSERT INTO "${db.schema}".contacts VALUES (?, ?)`, ['knex', 'n@b.c']);
      await outbox.enqueue(fromKnex(trx), ContactCreated({ aggregateId: 'knex', payload: { email: 'n@b.c' } }));
    });
  } finally {
    await knex.destroy();
  }
  assert.equal(await count('knex'), 1);
});

it('Drizzle transaction', async () => {
  const drizzlePool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const orm = drizzle(drizzlePool);
  try {
    await orm.transaction(async (tx) => {
      await tx.execute(sql.raw(`INSERT INTO "${db.schema}".contacts VALUES ('drizzle', 'd@b.c')`));
      await outbox.enqueue(fromDrizzle(tx, sql), ContactCreated({ aggregateId: 'drizzle', payload: { email: 'd@b.c' } }));
    });
  } finally {
    await drizzlePool.end();
  }
  assert.equal(await count('drizzle'), 1);
});

class Order {
  readonly events = new DomainEvents();
  private constructor(readonly id: string, public status: string) {}
  static place(id: string, total: number): Order {
    const o = new Order(id, 'placed');
    o.events.record(OrderPlaced({ aggregateId: id, version: 1, payload: { total } }));
    return o;
  }
  cancel(reason: string): void {
    this.status = 'cancelled';
    this.events.record(OrderCancelled({ aggregateId: this.id, version: 2, payload: { reason } }));
  }
}

class Contact {
  readonly events = new DomainEvents();
  constructor(readonly id: string, readonly email: string) {
    this.events.record(ContactCreated({ aggregateId: id, payload: { email } }));
  }
}

it('unit of work writes the events aggregates recorded, in order, with the business rows', async () => {
  const client = await pool.connect();
  try {
    const uow = new UnitOfWork(outbox);
    await client.query('BEGIN');
    const order = uow.track(Order.place('uow-order', 42));
    order.cancel('changed mind');
    const contact = uow.track(new Contact('uow-contact', 'c@b.c'));
    await client.query(`INSERT INTO "${db.schema}".contacts VALUES ($1, $2)`, [contact.id, contact.email]);
    const ids = await uow.flush(client);
    await client.query('COMMIT');
    assert.equal(ids.length, 3);
    assert.equal(order.events.size, 0, 'events are taken off the aggregate once written');
  } finally {
    client.release();
  }
  const rows = await db.query<{ type: string }>(`SELECT type FROM "${db.schema}".outbox WHERE aggregate_id IN ('uow-order', 'uow-contact') ORDER BY seq`);
  assert.deepEqual(rows.map((r) => r.type), ['OrderPlaced', 'OrderCancelled', 'ContactCreated']);
});

it('a failed unit-of-work flush keeps the events for a retry', async () => {
  const uow = new UnitOfWork(outbox);
  const order = uow.track(Order.place('uow-fail', 1));
  const broken = { query: async () => { throw new Error('connection lost'); } };
  await assert.rejects(uow.flush(broken), /connection lost/);
  assert.equal(order.events.size, 1);
});

it('events recorded, added or tracked while a flush is in flight are kept for the next flush, not dropped with the written ones', async () => {
  const client = await pool.connect();
  try {
    const uow = new UnitOfWork(outbox);
    const order = uow.track(Order.place('uow-during', 1));
    await client.query('BEGIN');
    const flushing = uow.flush(client);
    // The insert is in flight: another step of the same request records more.
    order.cancel('during the flush');
    uow.add(ContactCreated({ aggregateId: 'uow-during-loose', payload: { email: 'l@b.c' } }));
    const late = uow.track(new Contact('uow-during-contact', 'd@b.c'));
    assert.equal((await flushing).length, 1);
    assert.equal(order.events.size, 1, 'the event recorded during the flush is still on the aggregate');
    assert.equal(late.events.size, 1);
    assert.equal((await uow.flush(client)).length, 3, 'the next flush writes the cancel, the loose event and the late aggregate');
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const rows = await db.query<{ type: string }>(`SELECT type FROM "${db.schema}".outbox WHERE aggregate_id LIKE 'uow-during%' ORDER BY seq`);
  assert.deepEqual(rows.map((r) => r.type), ['OrderPlaced', 'OrderCancelled', 'ContactCreated', 'ContactCreated']);
});

it('pg client: single and multi-event inserts run as named prepared statements, one per table and shape; prepare: false sends plain text', async () => {
  const other = await openDb('postgres');
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    // notify: false keeps one statement per shape (with NOTIFY on, a notifying twin of each shape is prepared as well).
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [ContactCreated] });
    const otherOutbox = createOutbox({ store: new PostgresOutboxStore({ schema: other.schema, notify: false }), events: [ContactCreated] });
    const plain = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false, prepare: false }), events: [ContactCreated] });
    const ev = (id: string) => ContactCreated({ aggregateId: id, payload: { email: `${id}@b.c` } });
    await client.query('BEGIN');
    await outbox.enqueue(fromPg(client), ev('prep-1'));
    await outbox.enqueue(fromPg(client), [ev('prep-2'), ev('prep-3')]);
    await otherOutbox.enqueue(fromPg(client), ev('prep-4'));
    await plain.enqueue(fromPg(client), ev('prep-5'));
    await outbox.enqueue(fromPg(client), ev('prep-6'));
    await client.query('COMMIT');
    const { rows } = await client.query<{ name: string }>(`SELECT name FROM pg_prepared_statements WHERE name LIKE 'txbox\_%' ORDER BY name`);
    // This store's single and multi shapes, the other table's single shape; `prepare: false` adds none.
    assert.equal(rows.length, 3);
    const stored = await db.query<{ aggregate_id: string; payload: { email: string }; version: string | null }>(
      `SELECT aggregate_id, payload, version FROM "${db.schema}".outbox WHERE aggregate_id LIKE 'prep-%' ORDER BY seq`,
    );
    assert.deepEqual(stored.map((r) => r.aggregate_id), ['prep-1', 'prep-2', 'prep-3', 'prep-5', 'prep-6']);
    assert.deepEqual(stored[0]!.payload, { email: 'prep-1@b.c' });
    assert.equal((await other.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${other.schema}".outbox`))[0]!.n, 1);
  } finally {
    await client.end();
    await other.close();
  }
});

it('applyVersioned on a pg client runs as one prepared statement per table and column set; prepare: false sends plain text', async () => {
  const { applyVersioned } = await import('txbox/postgres');
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    await client.query(`CREATE TABLE "${db.schema}".stock_view (sku text PRIMARY KEY, quantity int NOT NULL, version bigint NOT NULL)`);
    const upsert = (version: number, prepare?: boolean) =>
      applyVersioned(client, { table: `${db.schema}.stock_view`, id: { sku: 'A' }, version, values: { quantity: version * 10 }, ...(prepare === undefined ? {} : { prepare }) });
    assert.equal((await upsert(1)).status, 'applied');
    assert.equal((await upsert(2)).status, 'applied');
    assert.equal((await upsert(2)).status, 'stale');
    const prepared = async () => (await client.query(`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'txbox\\_%'`)).rows[0].n as number;
    assert.equal(await prepared(), 1);
    assert.equal((await upsert(3, false)).status, 'applied');
    assert.equal(await prepared(), 1);
    assert.deepEqual((await client.query(`SELECT quantity, version::int FROM "${db.schema}".stock_view`)).rows, [{ quantity: 30, version: 3 }]);
  } finally {
    await client.end();
  }
});

it('notifyIntervalMs: 0 notifies with every enqueue, a long interval once per interval; a bad value names the setting', async () => {
  const listener = new pg.Client({ connectionString: DATABASE_URL });
  await listener.connect();
  const store0 = new PostgresOutboxStore({ schema: db.schema, notifyIntervalMs: 0 });
  let notifications = 0;
  listener.on('notification', () => notifications++);
  await listener.query(`LISTEN "${store0.names.channel}"`);
  const client = await pool.connect();
  try {
    const run = async (store: PostgresOutboxStore, n: number) => {
      const ob = createOutbox({ store, events: [ContactCreated] });
      for (let i = 0; i < n; i++) {
        await client.query('BEGIN');
        await ob.enqueue(fromPg(client), ContactCreated({ aggregateId: `n-${i}`, payload: { email: 'n@b.c' } }));
        await client.query('COMMIT');
      }
      await new Promise((r) => setTimeout(r, 200)); // let the notifications arrive
    };
    await run(store0, 10);
    assert.equal(notifications, 10);
    notifications = 0;
    await run(new PostgresOutboxStore({ schema: db.schema, notifyIntervalMs: 60_000 }), 10);
    assert.equal(notifications, 1);
    assert.throws(() => new PostgresOutboxStore({ schema: db.schema, notifyIntervalMs: -1 }), /notifyIntervalMs/);
  } finally {
    client.release();
    await listener.end();
  }
});
