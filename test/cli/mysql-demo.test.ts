/**
 * `txbox demo` on MariaDB (`--store mysql`, or implied by a mysql:// URL): the
 * order service, the relay and the inventory service's inbox and projection
 * through txbox/mysql verify with nothing lost, phantom or reordered, across
 * relay crashes too, and drop their tables; a missing or mismatched URL exits
 * 2 naming the flag, an unreachable server 3 without the password.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import mysql from 'mysql2/promise';
import { runCli, type CliResult } from '../helpers/cli.ts';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

const demoTables = async (): Promise<string[]> => {
  const conn = await mysql.createConnection({ uri: MYSQL_URL });
  try {
    const [rows] = (await conn.query("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'txbox\\\\_demo\\\\_%'")) as unknown as [{ t: string }[]];
    return rows.map((r) => r.t);
  } finally {
    await conn.end();
  }
};

const verified = (r: CliResult, what: string): void => {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /txbox demo: MySQL\/MariaDB -> relay ->/, what);
  for (const line of [/lost\s+0\s+ok/, /phantom\s+0\s+ok/, /order violations\s+0\s+ok/, /projection of \d+ orders: 0\s+ok mismatched, 0 phantom/]) assert.match(r.stdout, line, what);
};

it('`txbox demo --store mysql` verifies on MariaDB, across relay crashes too, and drops its tables', async () => {
  const before = new Set(await demoTables());
  const [plain, crashing] = await Promise.all([
    runCli(['demo', '--store', 'mysql', '--events', '300', '--database-url', MYSQL_URL], {}, 120_000),
    // The store implied by the URL's scheme, from the environment.
    runCli(['demo', '--events', '400', '--crash-relay-every', '300ms'], { TXBOX_DATABASE_URL: MYSQL_URL }, 150_000),
  ]);
  verified(plain, 'demo on MariaDB');
  verified(crashing, 'demo on MariaDB with relay crashes');
  assert.match(plain.stdout, /relay restarts\s+0/);
  const restarts = Number(/relay restarts\s+(\d+)/.exec(crashing.stdout)?.[1]);
  assert.ok(restarts > 0, `relay restarts ${restarts}`);
  assert.deepEqual((await demoTables()).filter((t) => !before.has(t)), [], 'the demo drops its tables');
});

it('--store mysql without a MySQL URL, with a PostgreSQL one, or an unknown store exits 2 naming the flag; an unreachable server exits 3 without the password', async () => {
  const [none, postgresUrl, unknown, unreachable] = await Promise.all([
    runCli(['demo', '--store', 'mysql', '--events', '10'], { TXBOX_DATABASE_URL: '' }),
    runCli(['demo', '--store', 'mysql', '--events', '10', '--database-url', 'postgres://app@127.0.0.1:5432/app']),
    runCli(['demo', '--store', 'oracle', '--events', '10']),
    runCli(['demo', '--events', '10', '--database-url', 'mysql://u:supersecret@127.0.0.1:1/x']),
  ]);
  assert.equal(none.code, 2, none.stderr);
  assert.match(none.stderr, /--store mysql needs a MySQL or MariaDB server: pass --database-url mysql:\/\//);
  assert.equal(postgresUrl.code, 2, postgresUrl.stderr);
  assert.match(postgresUrl.stderr, /--store mysql: --database-url is not a mysql:\/\/ or mariadb:\/\/ URL/);
  assert.equal(unknown.code, 2, unknown.stderr);
  assert.match(unknown.stderr, /--store: unknown "oracle"; choose postgres, mysql or firestore/);
  assert.equal(unreachable.code, 3, unreachable.stderr);
  assert.match(unreachable.stderr, /cannot reach the database at mysql:\/\/u:\*\*\*\*@127\.0\.0\.1:1\/x/);
  assert.doesNotMatch(unreachable.stderr + unreachable.stdout, /supersecret/);
});
