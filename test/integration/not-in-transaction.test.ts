/**
 * `enqueue` outside a transaction: a pool, a client before BEGIN or after
 * COMMIT, a PGlite database, a Kysely or Knex instance, a Drizzle database.
 * Each is refused with a clear error before any SQL, unless the outbox was
 * created with `allowAutocommit: true`. Real PostgreSQL and PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PGlite } from '@electric-sql/pglite';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import knexFactory from 'knex';
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import { NotInTransactionError, createOutbox, defineEvent, fromDrizzle, fromKnex, fromKysely, fromPg, fromPglite, payloadType } from 'txbox';
import { PostgresOutboxStore, migratePostgres, postgresNames } from 'txbox/postgres';
import { pgliteConnection } from 'txbox/pglite';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

let db: TestDb;
let pool: pg.Pool;
before(async () => {
  db = await openDb('postgres');
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
});
after(async () => {
  await pool.end();
  await db.close();
});

const refused = (pattern: RegExp) => (e: unknown) => e instanceof NotInTransactionError && e.code === 'TXBOX_NOT_IN_TRANSACTION' && e.field === 'tx' && pattern.test(e.message) && /allowAutocommit/.test(e.message);

async function count(aggregateId: string): Promise<number> {
  const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE aggregate_id = $1`, [aggregateId]);
  return rows[0]!.n;
}

describe('enqueue outside a transaction on PostgreSQL', () => {
  it('refuses a pg Pool, and writes nothing', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    await assert.rejects(outbox.enqueue(pool, Placed({ aggregateId: 'pool', payload: { n: 1 } })), refused(/pg Pool/));
    assert.equal(await count('pool'), 0);
  });

  it('refuses a pg client before BEGIN and after COMMIT, accepts it inside, and keeps the transaction usable', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    const client = await pool.connect();
    try {
      await assert.rejects(outbox.enqueue(fromPg(client), Placed({ aggregateId: 'before', payload: { n: 1 } })), refused(/outside a transaction/));
      await client.query('BEGIN');
      await outbox.enqueue(client, Placed({ aggregateId: 'inside', payload: { n: 1 } }));
      await client.query('COMMIT');
      await assert.rejects(outbox.enqueue(client, Placed({ aggregateId: 'after', payload: { n: 1 } })), refused(/outside a transaction/));
    } finally {
      client.release();
    }
    assert.deepEqual([await count('before'), await count('inside'), await count('after')], [0, 1, 0]);
  });

  it('writes in autocommit when the outbox opts out with allowAutocommit', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed], allowAutocommit: true });
    await outbox.enqueue(pool, Placed({ aggregateId: 'opt-out', payload: { n: 1 } }));
    assert.equal(await count('opt-out'), 1);
  });

  it('refuses a Kysely instance, a Knex instance and a Drizzle database, and accepts their transactions', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: DATABASE_URL, max: 2 }) }) });
    const knex = knexFactory({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
    const drizzlePool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    const orm = drizzle(drizzlePool);
    try {
      await assert.rejects(outbox.enqueue(fromKysely(kysely, CompiledQuery), Placed({ aggregateId: 'kysely-db', payload: { n: 1 } })), refused(/Kysely instance/));
      await kysely.transaction().execute((trx) => outbox.enqueue(fromKysely(trx, CompiledQuery), Placed({ aggregateId: 'kysely-trx', payload: { n: 1 } })));
      await assert.rejects(outbox.enqueue(fromKnex(knex), Placed({ aggregateId: 'knex-db', payload: { n: 1 } })), refused(/Knex instance/));
      await knex.transaction((trx) => outbox.enqueue(fromKnex(trx), Placed({ aggregateId: 'knex-trx', payload: { n: 1 } })));
      await assert.rejects(outbox.enqueue(fromDrizzle(orm, sql), Placed({ aggregateId: 'drizzle-db', payload: { n: 1 } })), refused(/Drizzle database/));
      await orm.transaction((tx) => outbox.enqueue(fromDrizzle(tx, sql), Placed({ aggregateId: 'drizzle-tx', payload: { n: 1 } })));
    } finally {
      await kysely.destroy();
      await knex.destroy();
      await drizzlePool.end();
    }
    const counts = await Promise.all(['kysely-db', 'kysely-trx', 'knex-db', 'knex-trx', 'drizzle-db', 'drizzle-tx'].map(count));
    assert.deepEqual(counts, [0, 1, 0, 1, 0, 1]);
  });
});

describe('enqueue outside a transaction on PGlite', () => {
  it('refuses the PGlite database and accepts its transaction', async () => {
    const pglite = new PGlite();
    try {
      const names = postgresNames({ schema: 'txbox' });
      await migratePostgres(pgliteConnection(pglite), names);
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'txbox' }), events: [Placed] });
      await assert.rejects(outbox.enqueue(fromPglite(pglite), Placed({ aggregateId: 'db', payload: { n: 1 } })), refused(/PGlite database/));
      await pglite.transaction((tx) => outbox.enqueue(fromPglite(tx), Placed({ aggregateId: 'tx', payload: { n: 1 } })));
      const { rows } = await pglite.query<{ aggregate_id: string }>('SELECT aggregate_id FROM txbox.outbox');
      assert.deepEqual(rows.map((r) => r.aggregate_id), ['tx']);
    } finally {
      await pglite.close();
    }
  });

  it('refuses the PGlite database inside its own db.transaction() instead of waiting for it forever, and accepts it after a manual BEGIN', async () => {
    const pglite = new PGlite();
    try {
      await migratePostgres(pgliteConnection(pglite), postgresNames({ schema: 'txbox' }));
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'txbox' }), events: [Placed] });
      // db.transaction() holds PGlite's transaction lock, and db.query() waits for it: the transaction would never end.
      const inside = pglite.transaction(async (tx) => {
        await tx.query('SELECT 1');
        await outbox.enqueue(fromPglite(pglite), Placed({ aggregateId: 'db-in-tx', payload: { n: 1 } }));
      });
      const outcome = await Promise.race([inside.then(() => 'resolved', (e: unknown) => e), new Promise((r) => setTimeout(r, 3000, 'hung'))]);
      assert.ok(outcome instanceof NotInTransactionError, `expected a refusal, got ${String(outcome)}`);
      assert.match(outcome.message, /db\.transaction\(\)/);
      assert.equal(outcome.field, 'tx');
      // A manual BEGIN on the database itself is a transaction, and nothing waits.
      await pglite.exec('BEGIN');
      await outbox.enqueue(fromPglite(pglite), Placed({ aggregateId: 'db-begin', payload: { n: 1 } }));
      await pglite.exec('COMMIT');
      const { rows } = await pglite.query<{ aggregate_id: string }>('SELECT aggregate_id FROM txbox.outbox ORDER BY seq');
      assert.deepEqual(rows.map((r) => r.aggregate_id), ['db-begin']);
    } finally {
      await pglite.close();
    }
  });
});
