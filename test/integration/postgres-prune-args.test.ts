/**
 * `prune` of the PostgreSQL (and PGlite) admins with a batch size that is not
 * a positive whole number: 0 looped for ever before 28 Nov 2026 (thousands of
 * DELETEs a second; the exit test `deleted < batchSize` is never true). The
 * CLI and the MySQL admin checked it; the PostgreSQL library API did not.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from 'txbox';
import { PostgresAdmin, PostgresInboxAdmin, inboxNames, migrateInbox } from 'txbox/postgres';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

for (const kind of BACKENDS) {
  describe(`prune arguments on ${kind}`, () => {
    let db: TestDb;
    before(async () => {
      db = await openDb(kind);
      await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    });
    after(async () => {
      await db.close();
    });

    const refused = (err: unknown): boolean => err instanceof ConfigError && err.field === 'batchSize';
    const bounded = <T>(p: Promise<T>): Promise<T> =>
      Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error('still running after 3 s')), 3000))]);

    for (const batchSize of [0, -1, 1.5, Number.NaN]) {
      it(`batchSize ${batchSize} is refused, not looped on`, async () => {
        await assert.rejects(bounded(new PostgresAdmin(db.connection, { schema: db.schema }).prune(1000, batchSize)), refused);
        await assert.rejects(bounded(new PostgresInboxAdmin(db.connection, { schema: db.schema }).prune(1000, batchSize)), refused);
      });
    }
  });
}
