/**
 * Enqueue on MariaDB through Kysely (MysqlDialect), Knex (mysql2 client) and
 * Drizzle (drizzle-orm/mysql2) transactions, via `mysqlFromKysely` /
 * `mysqlFromKnex` / `mysqlFromDrizzle`: a commit keeps the
 * business row and the event, a rollback leaves neither, and the query
 * builder's instance instead of its transaction is refused before any SQL.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createPool } from 'mysql2';
import mysql from 'mysql2/promise';
import { CompiledQuery, Kysely, MysqlDialect, sql } from 'kysely';
import knexFactory, { type Knex } from 'knex';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { int, mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { NotInTransactionError, createOutbox, defineEvent, payloadType } from 'txbox';
import { MysqlOutboxStore, migrateMysql, mysqlConnection, mysqlFromDrizzle, mysqlFromKnex, mysqlFromKysely, mysqlNames } from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ total: number }>() });

const database = `txbox_myqb_${randomBytes(4).toString('hex')}`;
const uri = MYSQL_URL.replace(/\/[^/]*$/, `/${database}`);
let root: mysql.Connection;
let pool: mysql.Pool;
let kysely: Kysely<{ orders: { id: string; total: number } }>;
let knex: Knex;
let drizzlePool: mysql.Pool;
let orm: MySql2Database;
const orders = mysqlTable('orders', { id: varchar('id', { length: 50 }).primaryKey(), total: int('total').notNull() });
const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [OrderPlaced] });

before(async () => {
  root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  pool = mysql.createPool({ uri, connectionLimit: 4 });
  const connection = await mysqlConnection({ pool });
  await migrateMysql(connection, mysqlNames());
  await pool.query('CREATE TABLE orders (id VARCHAR(50) PRIMARY KEY, total INT NOT NULL) ENGINE = InnoDB');
  kysely = new Kysely({ dialect: new MysqlDialect({ pool: createPool({ uri, connectionLimit: 2 }) }) });
  knex = knexFactory({ client: 'mysql2', connection: uri, pool: { min: 0, max: 2 } });
  drizzlePool = mysql.createPool({ uri, connectionLimit: 2 });
  orm = drizzle({ client: drizzlePool });
});
after(async () => {
  await kysely.destroy();
  await knex.destroy();
  await drizzlePool.end();
  await pool.end();
  await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await root.end();
});

async function state(orderId: string): Promise<{ order: boolean; events: number }> {
  const [orders] = (await pool.query('SELECT 1 FROM orders WHERE id = ?', [orderId])) as unknown as [unknown[]];
  const [events] = (await pool.query('SELECT 1 FROM outbox WHERE aggregate_id = ?', [orderId])) as unknown as [unknown[]];
  return { order: orders.length === 1, events: events.length };
}

it('Kysely: the event commits with the business row, a rollback leaves neither, the Kysely instance is refused', async () => {
  await kysely.transaction().execute(async (trx) => {
    await trx.insertInto('orders').values({ id: 'k-1', total: 10 }).execute();
    await outbox.enqueue(mysqlFromKysely(trx, CompiledQuery), [OrderPlaced({ aggregateId: 'k-1', payload: { total: 10 } }), OrderPlaced({ aggregateId: 'k-1', payload: { total: 11 } })]);
  });
  assert.deepEqual(await state('k-1'), { order: true, events: 2 });
  await assert.rejects(
    kysely.transaction().execute(async (trx) => {
      await sql`INSERT INTO orders (id, total) VALUES (${'k-2'}, ${20})`.execute(trx);
      await outbox.enqueue(mysqlFromKysely(trx, CompiledQuery), OrderPlaced({ aggregateId: 'k-2', payload: { total: 20 } }));
      throw new Error('business rule failed');
    }),
    /business rule failed/,
  );
  assert.deepEqual(await state('k-2'), { order: false, events: 0 });
  await assert.rejects(outbox.enqueue(mysqlFromKysely(kysely, CompiledQuery), OrderPlaced({ aggregateId: 'k-3', payload: { total: 1 } })), (err: unknown) => err instanceof NotInTransactionError && /Kysely instance/.test(err.message));
  assert.deepEqual(await state('k-3'), { order: false, events: 0 });
});

it('Knex: the event commits with the business row, a rollback leaves neither, the Knex instance is refused', async () => {
  await knex.transaction(async (trx) => {
    await trx('orders').insert({ id: 'n-1', total: 10 });
    await outbox.enqueue(mysqlFromKnex(trx), OrderPlaced({ aggregateId: 'n-1', payload: { total: 10 } }));
  });
  assert.deepEqual(await state('n-1'), { order: true, events: 1 });
  await assert.rejects(
    knex.transaction(async (trx) => {
      await trx('orders').insert({ id: 'n-2', total: 20 });
      await outbox.enqueue(mysqlFromKnex(trx), OrderPlaced({ aggregateId: 'n-2', payload: { total: 20 } }));
      throw new Error('business rule failed');
    }),
    /business rule failed/,
  );
  assert.deepEqual(await state('n-2'), { order: false, events: 0 });
  await assert.rejects(outbox.enqueue(mysqlFromKnex(knex), OrderPlaced({ aggregateId: 'n-3', payload: { total: 1 } })), (err: unknown) => err instanceof NotInTransactionError && /Knex instance/.test(err.message));
  assert.deepEqual(await state('n-3'), { order: false, events: 0 });
});

it('Drizzle: the event commits with the business row, a rollback leaves neither, a nested transaction works, the Drizzle database is refused', async () => {
  await orm.transaction(async (tx) => {
    await tx.insert(orders).values({ id: 'd-1', total: 10 });
    await outbox.enqueue(mysqlFromDrizzle(tx, drizzleSql), [OrderPlaced({ aggregateId: 'd-1', payload: { total: 10 } }), OrderPlaced({ aggregateId: 'd-1', payload: { total: 11 } })]);
  });
  assert.deepEqual(await state('d-1'), { order: true, events: 2 });
  const [rows] = (await pool.query("SELECT CONCAT('', payload) AS payload FROM outbox WHERE aggregate_id = 'd-1' ORDER BY seq")) as unknown as [{ payload: string }[]];
  assert.deepEqual(rows.map((r) => JSON.parse(r.payload)), [{ total: 10 }, { total: 11 }]);
  await assert.rejects(
    orm.transaction(async (tx) => {
      await tx.insert(orders).values({ id: 'd-2', total: 20 });
      await outbox.enqueue(mysqlFromDrizzle(tx, drizzleSql), OrderPlaced({ aggregateId: 'd-2', payload: { total: 20 } }));
      throw new Error('business rule failed');
    }),
    /business rule failed/,
  );
  assert.deepEqual(await state('d-2'), { order: false, events: 0 });
  // A savepoint (Drizzle's nested transaction) rolled back takes its event with it; the outer one commits.
  await orm.transaction(async (tx) => {
    await tx.insert(orders).values({ id: 'd-4', total: 40 });
    await outbox.enqueue(mysqlFromDrizzle(tx, drizzleSql), OrderPlaced({ aggregateId: 'd-4', payload: { total: 40 } }));
    await assert.rejects(
      tx.transaction(async (inner) => {
        await outbox.enqueue(mysqlFromDrizzle(inner, drizzleSql), OrderPlaced({ aggregateId: 'd-5', payload: { total: 50 } }));
        throw new Error('inner failed');
      }),
      /inner failed/,
    );
  });
  assert.deepEqual(await state('d-4'), { order: true, events: 1 });
  assert.deepEqual(await state('d-5'), { order: false, events: 0 });
  await assert.rejects(outbox.enqueue(mysqlFromDrizzle(orm, drizzleSql), OrderPlaced({ aggregateId: 'd-3', payload: { total: 1 } })), (err: unknown) => err instanceof NotInTransactionError && /Drizzle database/.test(err.message));
  assert.deepEqual(await state('d-3'), { order: false, events: 0 });
});

it('Drizzle: a PostgreSQL Drizzle transaction does not compile as a MySQL one', () => {
  const pgOrm = drizzlePg.mock();
  const compileOnly = (tx: Parameters<Parameters<typeof pgOrm.transaction>[0]>[0]) =>
    // @ts-expect-error a Drizzle PostgreSQL transaction's execute resolves with an object, not mysql2's [rows, fields]
    mysqlFromDrizzle(tx, drizzleSql);
  assert.equal(typeof compileOnly, 'function');
});
