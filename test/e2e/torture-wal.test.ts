/**
 * `txbox torture --wake wal` as CI runs it: the CLI as a subprocess on
 * PostgreSQL over HTTP, its `txbox relay` processes in the WAL wake mode
 * (a replication slot each, claims by seq: docs/wal.md) killed with SIGKILL,
 * paused past their lease and cut off with pg_terminate_backend; nothing
 * lost, phantom or reordered. Its own file, so that its time does not count
 * against torture.test.ts's runs.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';
import { assertClean } from '../helpers/torture-summary.ts';

it('PostgreSQL over HTTP in the WAL wake mode (claims by seq): 5000 events, 8 kills, nothing lost, phantom or reordered', { timeout: 300_000 }, async () => {
  const r = await runCli(['torture', '--database-url', DATABASE_URL, '--transport', 'http', '--wake', 'wal', '--events', '5000', '--kills', '8'], {}, 290_000);
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr.slice(-3000)}`);
  assert.match(r.stdout, /WAL wake mode/);
  assertClean(r.stdout, false, '5000', '8');
});

