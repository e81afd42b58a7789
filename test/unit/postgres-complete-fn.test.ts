/**
 * Migration 010's function `<table>_complete` runs the relay's mark of a small
 * batch with a plan kept for the session; larger batches run completeSql's
 * statement, planned per call. Both must be the same statement: this keeps the
 * function's two bodies (delete on publish, keep rows) equal to completeSql's
 * text, with the parameters named as the function names them.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { completeSql, type PostgresNames } from '../../src/stores/postgres/postgres-sql.ts';

const migration = readFileSync(new URL('../../sql/postgres/010_complete_small_batches.sql', import.meta.url), 'utf8');
// The names as the migration's template writes them.
const names = { outbox: '{{schema}}.{{table}}', buckets: '{{schema}}.{{table:_buckets}}' } as PostgresNames;
const PARAMS = ['p_relay', 'p_seqs', 'p_tokens', 'p_outcomes', 'p_delays', 'p_errors', 'p_routes'];
const normalize = (sql: string): string => sql.replace(/\s+/g, ' ').trim();

/** The query after the `RETURN QUERY` of the branch that starts with `marker`. */
function body(marker: string): string {
  const from = migration.indexOf(marker);
  assert.ok(from >= 0, marker);
  const start = migration.indexOf('RETURN QUERY', from) + 'RETURN QUERY'.length;
  return normalize(migration.slice(start, migration.indexOf(';', start)));
}

for (const [marker, deleteOnPublish] of [['IF p_delete THEN', true], ['ELSE', false]] as const) {
  it(`the function's ${deleteOnPublish ? 'delete-on-publish' : 'keep-rows'} body is completeSql's statement`, () => {
    const statement = completeSql(names, deleteOnPublish, true).replace(/\$([1-7])\b/g, (_m, d: string) => PARAMS[Number(d) - 1]!);
    assert.equal(body(marker), normalize(statement));
  });
}
