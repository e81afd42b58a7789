/**
 * The outbox and the inbox migrated at the same time into a schema that does
 * not exist yet (two services of one deploy starting together, or one
 * service calling migratePostgres and migrateInbox at once). Each took only
 * its own table's advisory lock, so both ran `CREATE SCHEMA IF NOT EXISTS`
 * and the second failed with a duplicate key on pg_namespace (SQLSTATE
 * 23505) before 28 Nov 2026. Real PostgreSQL (PGlite serves one transaction
 * at a time, so it cannot race).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { inboxNames, migrateInbox, migratePostgres, postgresNames } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';

let db: TestDb;
const schemas: string[] = [];

before(async () => {
  db = await openDb('postgres', { migrate: false });
});
after(async () => {
  for (const s of schemas) await db.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await db.close();
});

it('the outbox and the inbox migrate at once into a new schema, and so do two tables of the outbox', async () => {
  for (let round = 0; round < 5; round++) {
    const schema = `txbox_mig_${randomBytes(4).toString('hex')}`;
    schemas.push(schema);
    const results = await Promise.allSettled([
      migratePostgres(db.connection, postgresNames({ schema })),
      migrateInbox(db.connection, inboxNames({ schema })),
      migratePostgres(db.connection, postgresNames({ schema, table: 'outbox_b' })),
    ]);
    const failed = results.flatMap((r) => (r.status === 'rejected' ? [String((r.reason as Error).message)] : []));
    assert.deepEqual(failed, [], `round ${round}`);
    const tables = await db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('outbox', 'inbox', 'outbox_b') ORDER BY 1`, [schema]);
    assert.deepEqual(
      tables.map((t) => t.table_name),
      ['inbox', 'outbox', 'outbox_b'],
    );
  }
});
