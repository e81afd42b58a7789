/**
 * MySQL/MariaDB migrations: two migrateMysql calls at once apply each file
 * once (GET_LOCK), a second run applies nothing, a rerun after a crash
 * between an ADD COLUMN and its record completes, --print text names the
 * tables, and a bad table name is refused naming the field.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { ConfigError } from 'txbox';
import { migrateMysql, mysqlConnection, mysqlNames, printMysqlMigrations } from '../../src/stores/mysql/index.ts';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

it('concurrent migrations apply each file once under GET_LOCK; a rerun applies nothing', async () => {
  const database = `txbox_storeconf_mig_${randomBytes(4).toString('hex')}`;
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  const a = await mysqlConnection({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`) });
  const b = await mysqlConnection({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`) });
  try {
    const names = mysqlNames({ table: 'orders_outbox' });
    const [x, y] = await Promise.all([migrateMysql(a, names), migrateMysql(b, names)]);
    assert.deepEqual([...x, ...y], ['001_outbox.sql', '002_relay_circuits.sql'], 'one of them applied them, the other found them applied');
    assert.deepEqual(await migrateMysql(a, names), []);
    const buckets = await a.query<{ n: string | number }>('SELECT count(*) AS n FROM orders_outbox_buckets');
    assert.equal(Number(buckets[0]!.n), 256);
    // A run that crashed after the ALTER (DDL commits on its own) and before recording it: the rerun finds the
    // column there (errno 1060; MySQL 8 has no ADD COLUMN IF NOT EXISTS) and records the migration.
    await a.query("DELETE FROM orders_outbox_migrations WHERE name = '002_relay_circuits.sql'");
    assert.deepEqual(await migrateMysql(a, names), ['002_relay_circuits.sql']);
    const columns = await a.query<{ name: string }>("SELECT column_name AS name FROM information_schema.COLUMNS WHERE table_schema = DATABASE() AND table_name = 'orders_outbox_relays' AND column_name = 'circuits'");
    assert.equal(columns.length, 1);
  } finally {
    await a.close();
    await b.close();
    await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await root.end();
  }
});

it('--print renders the migrations with the quoted names; a bad name is refused naming the field', () => {
  const text = printMysqlMigrations(mysqlNames({ database: 'app', table: 'outbox' }));
  assert.match(text, /^-- 001_outbox\.sql/);
  assert.match(text, /CREATE TABLE IF NOT EXISTS `app`\.`outbox` \(/);
  assert.match(text, /CREATE TABLE IF NOT EXISTS `app`\.`outbox_buckets`/);
  assert.doesNotMatch(text, /\{\{/);
  assert.throws(() => mysqlNames({ table: 'outbox`; DROP TABLE x' }), (err: unknown) => err instanceof ConfigError && /table/.test(err.message));
  assert.throws(() => mysqlNames({ database: 'a-b' }), (err: unknown) => err instanceof ConfigError && /database/.test(err.message));
});
