/** MySQL/MariaDB names: the migration lock's name fits MySQL 5.7+'s 64-character limit for GET_LOCK, whatever the database and table names. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { mysqlInboxNames, mysqlNames } from '../../src/stores/mysql/mysql-sql.ts';

it('the migration lock name is at most 64 characters, distinct per database and table, and readable when it fits', () => {
  assert.equal(mysqlNames({ database: 'shop', table: 'outbox' }).lockName, 'txbox_migrate.shop.outbox');
  const longest = [mysqlNames({ database: 'd'.repeat(64), table: 't'.repeat(50) }), mysqlInboxNames({ database: 'd'.repeat(64), table: 'i'.repeat(50) }), mysqlNames({ table: 't'.repeat(50) })];
  for (const n of longest) assert.ok(n.lockName.length <= 64, `${n.lockName.length} characters: ${n.lockName}`);
  assert.notEqual(mysqlNames({ database: 'd'.repeat(64), table: 't'.repeat(50) }).lockName, mysqlNames({ database: 'd'.repeat(64), table: `${'t'.repeat(49)}u` }).lockName);
});
