/**
 * `txbox migrate|relay|status|parked|replay` on MariaDB (TXBOX_TEST_MYSQL_URL,
 * default mysql://root@127.0.0.1:3306/test), as a user runs them: a
 * subprocess whose database URL's scheme (mysql://, mariadb://) picks the
 * MySQL backend. One fresh database for the file, one table prefix (--table)
 * per test, dropped afterwards. The MySQL store is imported from the source
 * (it is not a package subpath yet). `inbox`, `prune` and `dashboard`:
 * mysql-cli-ops.test.ts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { userInfo } from 'node:os';
import mysql from 'mysql2/promise';
import { createOutbox, defineEvent, payloadType, type NewEvent } from 'txbox';
import { MysqlOutboxStore } from '../../src/stores/mysql/mysql-outbox-store.ts';
import { MysqlAdmin, mysqlConnection } from '../../src/stores/mysql/index.ts';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Shipped = defineEvent({ type: 'ItemShipped', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });

const database = `txbox_mycli_${randomBytes(4).toString('hex')}`;
const url = MYSQL_URL.replace(/\/[^/]*$/, `/${database}`);
let pool: mysql.Pool;
let tables = 0;

/** A fresh table prefix in the file's database (migrated unless told). */
async function freshTable(migrate = true): Promise<string> {
  const table = `t${++tables}_${randomBytes(3).toString('hex')}`;
  if (migrate) expectExit(await runCli(['migrate', '--table', table], envFor(table)), 0, 'migrate');
  return table;
}

function envFor(table: string, extra: Record<string, string> = {}): Record<string, string> {
  return { TXBOX_DATABASE_URL: url, TXBOX_TABLE: table, TXBOX_LOG_LEVEL: 'warn', ...extra };
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

async function query<R>(sql: string, values: unknown[] = []): Promise<R[]> {
  const [rows] = await pool.query(sql, values);
  return rows as R[];
}

async function enqueue(table: string, events: NewEvent<{ n: number }>[]): Promise<string[]> {
  const outbox = createOutbox({ store: new MysqlOutboxStore({ table }), events: [Placed, Shipped] });
  const conn = await pool.getConnection();
  try {
    await conn.beginTransaction();
    const ids = await outbox.enqueue(conn, events);
    await conn.commit();
    return ids;
  } finally {
    conn.release();
  }
}

const events = (def: typeof Placed | typeof Shipped, count: number, from = 0): NewEvent<{ n: number }>[] =>
  Array.from({ length: count }, (_, i) => def({ aggregateId: `a${from + i}`, payload: { n: from + i } }));

const marks = (ids: readonly string[]): string => ids.map(() => '?').join(', ');

describe('txbox CLI on MySQL/MariaDB', { concurrency: true, timeout: 120_000 }, () => {
  before(async () => {
    const root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`CREATE DATABASE \`${database}\``);
    await root.end();
    pool = mysql.createPool({ uri: url, connectionLimit: 4, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' });
  });
  after(async () => {
    await pool.end();
    const root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await root.end();
  });

  it('`txbox migrate` creates the tables once (mysql:// and mariadb://), `--print` shows the SQL without a database', async () => {
    const table = await freshTable(false);
    const unmigrated = await runCli(['status'], envFor(table));
    expectExit(unmigrated, 3, 'status before migrate');
    assert.match(unmigrated.stderr, /`[^`]+` do not exist yet; run `txbox migrate`/);

    const first = await runCli(['migrate', '--table', table], { TXBOX_DATABASE_URL: url, TXBOX_LOG_LEVEL: 'warn' });
    expectExit(first, 0, 'migrate');
    assert.match(first.stdout, new RegExp(`applied 001_outbox\\.sql, 002_relay_circuits\\.sql to \`${table}\``));
    const again = await runCli(['migrate', '--table', table], { TXBOX_DATABASE_URL: url.replace(/^mysql:/, 'mariadb:'), TXBOX_LOG_LEVEL: 'warn' });
    expectExit(again, 0, 'migrate again through mariadb://');
    assert.match(again.stdout, new RegExp(`\`${table}\` is up to date`));
    const created = await query<{ name: string }>(`SELECT table_name AS name FROM information_schema.TABLES WHERE table_schema = ? AND table_name LIKE ? ORDER BY table_name`, [database, `${table}%`]);
    assert.deepEqual(created.map((r) => r.name), [table, `${table}_audit`, `${table}_buckets`, `${table}_migrations`, `${table}_relays`]);
    const [buckets] = await query<{ n: string }>(`SELECT count(*) AS n FROM \`${table}_buckets\``);
    assert.equal(Number(buckets!.n), 256);

    // --print needs no server: the URL's scheme alone picks MySQL's SQL (port 1 answers nothing).
    const [print, printPg] = await Promise.all([
      runCli(['migrate', '--print', '--table', 'shop_outbox'], { TXBOX_DATABASE_URL: 'mysql://nobody@127.0.0.1:1/none' }),
      runCli(['migrate', '--print', '--table', 'shop_outbox'], { TXBOX_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' }),
    ]);
    expectExit(print, 0, 'migrate --print on mysql://');
    assert.match(print.stdout, /CREATE TABLE IF NOT EXISTS `shop_outbox` \(/);
    assert.match(print.stdout, /ENGINE = InnoDB/);
    assert.doesNotMatch(print.stdout, /\{\{/, 'placeholders rendered');
    expectExit(printPg, 0, 'migrate --print on postgres://');
    assert.match(printPg.stdout, /"txbox"\."shop_outbox"/, 'PostgreSQL keeps its own SQL');
    assert.doesNotMatch(printPg.stdout, /InnoDB/);
  });

  it('PostgreSQL-only settings, bad names and PostgreSQL-only commands are refused on MySQL, naming the setting; passwords are not printed', async () => {
    const table = await freshTable();
    const relayArgs = ['relay', '--transport', 'http', '--unsigned', '--endpoint', 'orders=http://127.0.0.1:1/x'];
    const [schemaFlag, schemaEnv, wakeWal, wakeMigrate, badTable, wal, secret, noDatabase, noSuchDb] = await Promise.all([
      runCli(['status', '--schema', 'billing'], envFor(table)),
      runCli(['parked', 'list'], envFor(table, { TXBOX_SCHEMA: 'billing' })),
      runCli([...relayArgs, '--wake', 'wal'], envFor(table)),
      runCli(['migrate', '--wake', 'wal'], envFor(table)),
      runCli(['status', '--table', 'x;drop'], { TXBOX_DATABASE_URL: url }),
      runCli(['wal', 'check'], envFor(table)),
      runCli(['status'], { TXBOX_DATABASE_URL: 'mysql://app:supersecret@127.0.0.1:1/x' }),
      runCli(['status'], { TXBOX_DATABASE_URL: MYSQL_URL.replace(/\/[^/]*$/, '') }),
      runCli(['status'], { TXBOX_DATABASE_URL: MYSQL_URL.replace(/\/[^/]*$/, `/${database}_missing`) }),
    ]);
    expectExit(schemaFlag, 2, 'status --schema on MySQL');
    assert.match(schemaFlag.stderr, /--schema: schemas are PostgreSQL's; on MySQL the tables live in the database the URL names/);
    expectExit(schemaEnv, 2, 'TXBOX_SCHEMA on MySQL');
    assert.match(schemaEnv.stderr, /TXBOX_SCHEMA: schemas are PostgreSQL's/);
    expectExit(wakeWal, 2, 'relay --wake wal on MySQL');
    assert.match(wakeWal.stderr, /--wake: the wake modes .* are PostgreSQL's; a relay on MySQL wakes by polling/);
    expectExit(wakeMigrate, 2, 'migrate --wake wal on MySQL');
    assert.match(wakeMigrate.stderr, /--wake: /);
    expectExit(badTable, 2, 'invalid table name');
    assert.match(badTable.stderr, /--table: "x;drop" is not a valid name/);
    expectExit(wal, 2, 'wal on MySQL');
    assert.match(wal.stderr, /TXBOX_DATABASE_URL is a MySQL URL: this command runs on PostgreSQL only \(on MySQL and MariaDB: .*prune, inbox, dashboard/);
    expectExit(secret, 3, 'unreachable MySQL with a password');
    assert.match(secret.stderr, /cannot reach the database at mysql:\/\/app:\*\*\*\*@127\.0\.0\.1:1\/x.*\(from TXBOX_DATABASE_URL\)/);
    assert.ok(!secret.stderr.includes('supersecret') && !secret.stdout.includes('supersecret'), `password leaked:\n${secret.stderr}`);
    expectExit(noDatabase, 2, 'a MySQL URL without a database');
    assert.match(noDatabase.stderr, /names no database/);
    expectExit(noSuchDb, 3, 'a database that does not exist');
    assert.match(noSuchDb.stderr, /was reached but has no such database/);
    // Nothing was created by the refused commands.
    const [x] = await query<{ n: string }>(`SELECT count(*) AS n FROM information_schema.TABLES WHERE table_schema = ? AND table_name LIKE 'x%'`, [database]);
    assert.equal(Number(x!.n), 0);
  });

  it('`txbox relay` on MySQL delivers to an HTTP endpoint, says it wakes by polling, and stops on SIGTERM releasing its leases', async () => {
    const table = await freshTable();
    const receiver = await startReceiver();
    try {
      const early = await enqueue(table, events(Shipped, 20));
      const relay = startCli(
        ['relay', '--transport', 'http', '--endpoint', `items=${receiver.url}/items`, '--poll-interval-ms', '100', '--relay-id', 'relay-mysql-e2e'],
        envFor(table, { TXBOX_WEBHOOK_SECRET: receiver.secret, TXBOX_LOG_LEVEL: 'info' }),
      );
      try {
        await waitFor('the ready line', () => /txbox relay ready: relay=relay-mysql-e2e buckets=\d+ transport=http/.test(relay.stdout()), 30_000);
        assert.match(relay.stderr(), /"msg":"txbox relay: MySQL store: idle relays wake by polling[^"]*","store":"mysql","pollIntervalMs":100/, 'the startup log says it polls');
        await waitFor('the first events delivered', () => early.every((id) => receiver.arrivals.some((a) => a.id === id)), 30_000);
        // Written after the relay started: found by polling.
        const late = await enqueue(table, events(Shipped, 3, 100));
        await waitFor('late events delivered', () => late.every((id) => receiver.arrivals.some((a) => a.id === id)), 30_000);
        await waitFor('every event marked published', async () => {
          const [row] = await query<{ n: string }>(`SELECT count(*) AS n FROM \`${table}\` WHERE state = 'published'`);
          return Number(row!.n) === 23;
        }, 30_000);
        const [held] = await query<{ n: string }>(`SELECT count(*) AS n FROM \`${table}_buckets\` WHERE owner = 'relay-mysql-e2e'`);
        assert.ok(Number(held!.n) > 0, 'the running relay holds leases');
      } finally {
        relay.child.kill('SIGTERM');
        expectExit(await relay.exited, 0, 'relay after SIGTERM');
      }
      assert.equal(new Set(receiver.arrivals.map((a) => a.id)).size, 23);
      const [owned] = await query<{ n: string }>(`SELECT count(*) AS n FROM \`${table}_buckets\` WHERE owner IS NOT NULL`);
      assert.equal(Number(owned!.n), 0, 'leases released');
      const left = await query<{ relay_id: string; gone: number }>(`SELECT relay_id, left_at IS NOT NULL AS gone FROM \`${table}_relays\``);
      assert.deepEqual(left.map((r) => [r.relay_id, Number(r.gone)]), [['relay-mysql-e2e', 1]], 'a gracefully stopped relay is marked left');
    } finally {
      await receiver.close();
    }
  });

  it('`txbox relay --delete-on-publish` on MySQL deletes the rows it publishes', async () => {
    const table = await freshTable();
    const receiver = await startReceiver();
    try {
      const ids = await enqueue(table, events(Shipped, 12));
      const relay = startCli(
        ['relay', '--transport', 'http', '--endpoint', `items=${receiver.url}/items`, '--poll-interval-ms', '100', '--relay-id', 'relay-mysql-del', '--delete-on-publish'],
        envFor(table, { TXBOX_WEBHOOK_SECRET: receiver.secret, TXBOX_LOG_LEVEL: 'warn' }),
      );
      try {
        await waitFor('every event delivered', () => ids.every((id) => receiver.arrivals.some((a) => a.id === id)), 30_000);
        await waitFor('every row deleted', async () => {
          const [row] = await query<{ n: string }>(`SELECT count(*) AS n FROM \`${table}\``);
          return Number(row!.n) === 0;
        }, 30_000);
      } finally {
        relay.child.kill('SIGTERM');
        expectExit(await relay.exited, 0, 'relay --delete-on-publish after SIGTERM');
      }
      assert.equal(new Set(receiver.arrivals.map((a) => a.id)).size, 12);
    } finally {
      await receiver.close();
    }
  });

  it('`txbox status` and `status --json` on MySQL: backlog per destination, oldest pending, parked, behind parked, relays, table', async () => {
    const table = await freshTable();
    const placed = await enqueue(table, events(Placed, 6));
    const shipped = await enqueue(table, events(Shipped, 5));
    const blocked = await enqueue(table, [Shipped({ aggregateId: 'a0', payload: { n: 99 } })]); // behind the parked items a0
    // orders: 2 pending (one 5 minutes old), 3 published, 1 parked; items: 4 pending (1 behind a parked one), 2 parked.
    await query(`UPDATE \`${table}\` SET state = 'published', done_at = UTC_TIMESTAMP(6) WHERE id IN (${marks(placed.slice(0, 3))})`, placed.slice(0, 3));
    const parked = [placed[3]!, ...shipped.slice(0, 2)];
    await query(`UPDATE \`${table}\` SET state = 'parked', attempts = 3, last_error = 'HTTP 400' WHERE id IN (${marks(parked)})`, parked);
    await query(`UPDATE \`${table}\` SET occurred_at = UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE WHERE id = ?`, [placed[4]]);
    // relay-alive's TTL is 5 minutes: on a loaded machine the status commands below started over 30 s after this insert.
    await query(
      `INSERT INTO \`${table}_relays\` (relay_id, host, pid, published_total, rate_per_minute, ttl_ms, heartbeat_at, circuits) VALUES
       ('relay-alive', 'host-a', 4242, 3, 3, 300000, UTC_TIMESTAMP(6), ?), ('relay-gone', 'host-b', 7, 9, 0, 30000, UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE, ?)`,
      [
        JSON.stringify([{ destination: 'billing', reason: 'HTTP 401 from http://billing.internal/hooks', openSince: '2026-01-02T03:04:05.000Z', nextProbeAt: '2026-01-02T03:05:05.000Z', failedProbes: 2 }]),
        // A relay that stopped heartbeating 10 minutes ago pauses nothing any more: its circuits are not shown.
        JSON.stringify([{ destination: 'items', reason: 'connection refused', openSince: '2026-01-01T00:00:00.000Z', nextProbeAt: '2026-01-01T00:01:00.000Z', failedProbes: 0 }]),
      ],
    );
    await query(`UPDATE \`${table}_buckets\` SET owner = 'relay-alive', token = 1, lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE bucket < 5`);
    assert.equal(blocked.length, 1);

    const [text, json] = await Promise.all([
      runCli(['status'], envFor(table, { TXBOX_DATABASE_URL: url.replace(/^mysql:/, 'mariadb:') })),
      runCli(['status', '--json'], envFor(table)),
    ]);
    expectExit(text, 0, 'status');
    expectExit(json, 0, 'status --json');
    assert.match(text.stdout, new RegExp(`^outbox \`${table}\`$`, 'm'));
    assert.match(text.stdout, /pending 6 .*parked 3 .*published last minute 3/);
    assert.match(text.stdout, /^items\s+4\s+0\s+2\s+1\s+\S+s$/m, text.stdout);
    assert.match(text.stdout, /^orders\s+2\s+0\s+1\s+0\s+5\.\dm$/m, `oldest pending of orders is about 5 minutes:\n${text.stdout}`);
    assert.match(text.stdout, /^relay-alive\s+alive, heartbeat [\d.]+s ago\s+5\s+0\s+3$/m, text.stdout);
    // 9.5 minutes after the insert; 10.x when the machine is loaded enough that the command starts 30 s later.
    assert.match(text.stdout, /^relay-gone\s+expired (?:9|10)\.\dm ago\s+0\s+-\s+-$/m, text.stdout);
    assert.match(text.stdout, /^table: [\d.]+ MiB with indexes, ~\d+ rows/m);
    assert.doesNotMatch(text.stdout, /autovacuum|replication slot/, 'no PostgreSQL-only lines');
    assert.match(text.stdout, /^destinations down \(circuit open: events wait pending, in order, attempts not counted\):$/m, text.stdout);
    assert.match(
      text.stdout,
      /^ {2}billing: circuit open since 2026-01-02T03:04:05\.000Z \(relay relay-alive\), reason HTTP 401 from http:\/\/billing\.internal\/hooks, next probe 2026-01-02T03:05:05\.000Z, 2 failed probes$/m,
      text.stdout,
    );
    assert.doesNotMatch(text.stdout, /items: circuit open|relay-gone\), reason/, 'the expired relay\'s circuits are not shown');

    const status = JSON.parse(json.stdout) as {
      destinations: { destination: string; pending: number; parked: number; backingOff: number; blockedByParked: number; oldestPendingSeconds: number | null }[];
      relays: { relayId: string; host: string; pid: number; alive: boolean; state: string; buckets: number }[];
      table: { totalBytes: number; approxRows: number };
      inFlight: number;
      publishedLastMinute: number;
      circuits: { destination: string; relayId: string; reason: string; openSince: string; nextProbeAt: string; failedProbes: number }[];
    };
    const byDest = new Map(status.destinations.map((d) => [d.destination, d]));
    assert.deepEqual([...byDest.keys()], ['items', 'orders']);
    assert.deepEqual(
      [byDest.get('orders')!.pending, byDest.get('orders')!.parked, byDest.get('orders')!.blockedByParked, byDest.get('items')!.pending, byDest.get('items')!.parked, byDest.get('items')!.blockedByParked],
      [2, 1, 0, 4, 2, 1],
    );
    const oldest = byDest.get('orders')!.oldestPendingSeconds!;
    assert.ok(oldest >= 299 && oldest < 400, `oldest pending ${oldest}`);
    assert.deepEqual(
      status.relays.map((r) => [r.relayId, r.host, r.pid, r.alive, r.state, r.buckets]),
      [['relay-alive', 'host-a', 4242, true, 'alive', 5], ['relay-gone', 'host-b', 7, false, 'expired', 0]],
    );
    assert.ok(status.table.totalBytes > 0);
    assert.equal(status.publishedLastMinute, 3);
    assert.ok(!('slots' in status), 'no WAL slots on MySQL');
    assert.deepEqual(status.circuits, [
      { destination: 'billing', relayId: 'relay-alive', reason: 'HTTP 401 from http://billing.internal/hooks', openSince: '2026-01-02T03:04:05.000Z', nextProbeAt: '2026-01-02T03:05:05.000Z', failedProbes: 2 },
    ]);
  });

  it('`txbox parked` lists, retries, skips and discards on MySQL with an audit trail; `txbox replay` re-queues published events with their ids', async () => {
    const table = await freshTable();
    const [a, b, c, d] = await enqueue(table, events(Placed, 4));
    const [pending] = await enqueue(table, events(Shipped, 1, 50));
    const shipped = await enqueue(table, events(Shipped, 2));
    await query(`UPDATE \`${table}\` SET state = 'parked', attempts = 3, last_error = 'HTTP 422 Unprocessable Entity: total must be positive' WHERE id IN (?, ?, ?, ?)`, [a, b, c, d]);
    await query(`UPDATE \`${table}\` SET state = 'published', done_at = UTC_TIMESTAMP(6) WHERE id IN (?, ?)`, shipped);
    const unknown = randomUUID();

    const [list, listJson, notParked, noSelector] = await Promise.all([
      runCli(['parked', 'list'], envFor(table)),
      runCli(['parked', 'list', '--json', '--destination', 'orders', '--limit', '3'], envFor(table)),
      runCli(['parked', 'retry', '--id', pending!, '--id', unknown], envFor(table)),
      runCli(['parked', 'retry'], envFor(table)),
    ]);
    expectExit(list, 0, 'parked list');
    for (const id of [a, b, c, d]) assert.ok(list.stdout.includes(id!), `list shows ${id}:\n${list.stdout}`);
    assert.ok(!list.stdout.includes(pending!), 'list does not show the pending event');
    assert.match(list.stdout, /dest=orders {2}key=Order:a0 {2}attempts=3 {2}occurred=\d{4}-\d\d-\d\dT[\d:.]+Z\n {4}HTTP 422 Unprocessable Entity: total must be positive/);
    expectExit(listJson, 0, 'parked list --json');
    const parsed = JSON.parse(listJson.stdout) as { id: string; lastError: string; destination: string; parkedAt: null }[];
    assert.deepEqual(parsed.map((p) => p.id), [a, b, c], '--limit, oldest first');
    assert.ok(parsed.every((p) => p.destination === 'orders' && /HTTP 422/.test(p.lastError) && p.parkedAt === null));
    expectExit(notParked, 1, 'parked retry of ids that are not parked');
    assert.ok((notParked.stdout + notParked.stderr).includes(unknown), notParked.stdout);
    expectExit(noSelector, 2, 'parked retry without --id or --all');

    const [retry, discard] = await Promise.all([
      runCli(['parked', 'retry', '--id', a!, '--actor', 'alice'], envFor(table)),
      runCli(['parked', 'discard', '--id', b!.toUpperCase(), '--actor', 'bob'], envFor(table)),
    ]);
    expectExit(retry, 0, 'parked retry --id');
    assert.match(retry.stdout, /retried 1 parked event/);
    expectExit(discard, 0, 'parked discard --id (upper case)');
    assert.match(discard.stdout, /discarded 1 parked event/);
    const skip = await runCli(['parked', 'skip', '--all', '--destination', 'orders'], envFor(table));
    expectExit(skip, 0, 'parked skip --all --destination');
    assert.match(skip.stdout, /skipped 2 parked event/);

    const rows = new Map((await query<{ id: string; state: string; attempts: number }>(`SELECT id, state, attempts FROM \`${table}\``)).map((r) => [r.id, r]));
    assert.deepEqual([rows.get(a!)!.state, Number(rows.get(a!)!.attempts)], ['pending', 0]);
    assert.equal(rows.has(b!), false, 'discarded row is deleted');
    assert.equal(rows.get(c!)!.state, 'skipped');
    assert.equal(rows.get(d!)!.state, 'skipped');
    const audit = await query<{ action: string; event_id: string; actor: string; detail: string | null }>(`SELECT action, event_id, actor, detail FROM \`${table}_audit\` ORDER BY id`);
    const me = userInfo().username;
    assert.deepEqual(
      audit.map((r) => [r.action, r.event_id, r.actor]).sort(),
      [['retry', a, 'alice'], ['discard', b, 'bob'], ['skip', c, me], ['skip', d, me]].sort(),
    );
    assert.ok(audit.every((r) => /HTTP 422/.test(r.detail ?? '')), 'audit keeps the last error');

    // replay: the published items come back pending, same ids, original order, after what is pending, with the header.
    const [replay, none] = await Promise.all([
      runCli(['replay', '--destination', 'items', '--from', '2000-01-01T00:00:00Z', '--actor', 'carol'], envFor(table)),
      runCli(['replay', '--type', 'ItemShipped', '--to', '2000-01-01T00:00:00Z'], envFor(table)),
    ]);
    expectExit(replay, 0, 'replay --destination --from');
    const replayId = /replay ([0-9a-f-]{36}): 2 event\(s\) queued/.exec(replay.stdout)?.[1];
    assert.ok(replayId, replay.stdout);
    expectExit(none, 0, 'replay matching nothing');
    assert.match(none.stdout, /: 0 event\(s\) queued/);
    const copies = await query<{ id: string; state: string; header: string; replay_id: string; seq: string }>(
      `SELECT id, state, JSON_UNQUOTE(JSON_EXTRACT(headers, '$."txbox-replay-id"')) AS header, replay_id, seq FROM \`${table}\` WHERE replay_id IS NOT NULL ORDER BY seq`,
    );
    assert.deepEqual(copies.map((r) => [r.id, r.state, r.header, r.replay_id]), shipped.map((id) => [id, 'pending', replayId, replayId]));
    const [maxOriginal] = await query<{ seq: string }>(`SELECT MAX(seq) AS seq FROM \`${table}\` WHERE replay_id IS NULL`);
    assert.ok(Number(copies[0]!.seq) > Number(maxOriginal!.seq), 'copies come after whatever was pending');
    const [replayAudit] = await query<{ actor: string; detail: string }>(`SELECT actor, detail FROM \`${table}_audit\` WHERE action = 'replay' AND detail LIKE ?`, [`%${replayId}%`]);
    assert.equal(replayAudit!.actor, 'carol');
    const [start] = await query<{ actor: string }>(`SELECT actor FROM \`${table}_audit\` WHERE action = 'replay-start' AND detail LIKE ?`, [`%${replayId}%`]);
    assert.equal(start?.actor, 'carol', 'the start is audited too');
  });

  it('a replay cut short is audited: its start is written before the first copy, with the id its copies carry', async () => {
    const table = await freshTable();
    const ids = await enqueue(table, Array.from({ length: 5 }, (_, i) => Shipped({ aggregateId: `cut${i}`, payload: { n: i } })));
    await query(`UPDATE \`${table}\` SET state = 'published', done_at = UTC_TIMESTAMP(6) WHERE id IN (?)`, [ids]);
    const connection = await mysqlConnection({ uri: url });
    const interrupted = new Error('interrupted after the first chunk');
    try {
      await assert.rejects(
        new MysqlAdmin(connection, { table }).replay({ type: 'ItemShipped' }, 'dave', () => {
          throw interrupted;
        }, 2),
        (err: unknown) => err === interrupted,
      );
    } finally {
      await connection.close();
    }
    const copies = await query<{ replay_id: string }>(`SELECT replay_id FROM \`${table}\` WHERE replay_id IS NOT NULL`);
    assert.equal(copies.length, 2, 'the first chunk was copied');
    const audit = await query<{ action: string; actor: string; detail: string }>(`SELECT action, actor, detail FROM \`${table}_audit\` ORDER BY id`);
    assert.deepEqual(audit.map((a) => [a.action, a.actor, JSON.parse(a.detail)]), [['replay-start', 'dave', { replayId: copies[0]!.replay_id, type: 'ItemShipped' }]]);
  });
});
