/**
 * `txbox inbox`, `prune` and `dashboard` on MariaDB (TXBOX_TEST_MYSQL_URL,
 * default mysql://root@127.0.0.1:3306/test), as a user runs them: a
 * subprocess whose mysql:// or mariadb:// URL picks the MySQL backend
 * (these three refused a MySQL URL before). Inbox rows are written by the
 * real MysqlInboxStore (failures, holds, processed batches). One fresh
 * database for the file, one table prefix per test. Also, at the library
 * level, why pruning `<table>_keys` is safe while consumers run.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { request, type IncomingHttpHeaders } from 'node:http';
import mysql from 'mysql2/promise';
import { createOutbox, defineEvent, payloadType, type NewEvent, type OutboxEvent } from 'txbox';
import { MysqlOutboxStore } from '../../src/stores/mysql/mysql-outbox-store.ts';
import { MysqlInboxStore, keySlot } from '../../src/stores/mysql/mysql-inbox-store.ts';
import { MysqlInboxAdmin } from '../../src/stores/mysql/mysql-inbox-admin.ts';
import { mysqlConnection, type MysqlConnection } from '../../src/stores/mysql/mysql-connection.ts';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number; secret?: string }>() });
const TOKEN = 'mysql-dashboard-token-0123456789abcdef';

const database = `txbox_myops_${randomBytes(4).toString('hex')}`;
const url = MYSQL_URL.replace(/\/[^/]*$/, `/${database}`);
let pool: mysql.Pool;
let connection: MysqlConnection;
let tables = 0;

const fresh = (): string => `o${++tables}_${randomBytes(3).toString('hex')}`;

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

async function enqueue(table: string, events: NewEvent<{ n: number; secret?: string }>[]): Promise<string[]> {
  const outbox = createOutbox({ store: new MysqlOutboxStore({ table }), events: [Placed] });
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

function inboundEvent(key: string, version: number | null): OutboxEvent {
  return { id: randomUUID(), type: 'StockChanged', aggregateType: 'Item', aggregateId: key, key: `Item:${key}`, destination: 'stock', payload: { key, version }, headers: {}, occurredAt: new Date(), version };
}

/**
 * An inbox table `table` with, for consumer `stock`: two processed events of
 * Item:a (versioned) and one of Item:b, a dead event of Item:c (versioned),
 * a held event of Item:d (versioned), a dead unversioned one.
 */
async function fillInbox(table: string) {
  const store = new MysqlInboxStore({ connection, table });
  const a1 = inboundEvent('a', 1);
  const a2 = inboundEvent('a', 2);
  const b1 = inboundEvent('b', 1);
  const c1 = inboundEvent('c', 1);
  const d1 = inboundEvent('d', 1);
  const d2 = inboundEvent('d', 2);
  const loose = inboundEvent('e', null);
  await store.runBatch('stock', [a1, a2, b1, c1, d1], async () => {});
  const c2 = inboundEvent('c', 2);
  await store.recordFailure('stock', c2, 'stock must not go negative', 1);
  await store.hold('stock', d2, 'version 2 of Item:d waits for version 1');
  await store.recordFailure('stock', loose, 'bad payload', 1);
  return { a1, a2, b1, c1, c2, d1, d2, loose };
}

function call(port: number, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('txbox inbox, prune and dashboard on MySQL/MariaDB', { concurrency: true, timeout: 180_000 }, () => {
  before(async () => {
    const root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`CREATE DATABASE \`${database}\``);
    await root.end();
    pool = mysql.createPool({ uri: url, connectionLimit: 6, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' });
    connection = await mysqlConnection({ uri: url, maxConnections: 6 });
  });
  after(async () => {
    await connection.close();
    await pool.end();
    const root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await root.end();
  });

  it('`txbox inbox migrate` (mysql://, mariadb://, --print without a server), then status, dead and held list/retry/discard, audited', async () => {
    const outbox = fresh();
    const inbox = `${outbox}_in`;
    const env = envFor(outbox);
    const before = await runCli(['inbox', 'status', '--inbox-table', inbox], env);
    expectExit(before, 3, 'inbox status before inbox migrate');
    assert.match(before.stderr, /the txbox inbox tables `[^`]+` do not exist yet; run `txbox inbox migrate`/);

    const [print, schema, badName] = await Promise.all([
      runCli(['inbox', 'migrate', '--print', '--inbox-table', 'shop_inbox'], { TXBOX_DATABASE_URL: 'mariadb://nobody@127.0.0.1:1/none' }),
      runCli(['inbox', 'status', '--schema', 'billing'], env),
      runCli(['inbox', 'migrate', '--inbox-table', 'x;drop'], env),
    ]);
    expectExit(print, 0, 'inbox migrate --print on mariadb://');
    assert.match(print.stdout, /CREATE TABLE IF NOT EXISTS `shop_inbox` \(/);
    assert.match(print.stdout, /CREATE TABLE IF NOT EXISTS `shop_inbox_keys` \(/);
    assert.doesNotMatch(print.stdout, /\{\{/);
    expectExit(schema, 2, 'inbox --schema on MySQL');
    assert.match(schema.stderr, /--schema: schemas are PostgreSQL's/);
    expectExit(badName, 2, 'a bad --inbox-table');
    assert.match(badName.stderr, /--inbox-table: "x;drop" is not a valid name/);

    const first = await runCli(['inbox', 'migrate', '--inbox-table', inbox], env);
    expectExit(first, 0, 'inbox migrate');
    assert.match(first.stdout, new RegExp(`applied 001_inbox\\.sql to \`${inbox}\``));
    const again = await runCli(['inbox', 'migrate', '--inbox-table', inbox], { ...env, TXBOX_DATABASE_URL: url.replace(/^mysql:/, 'mariadb:') });
    expectExit(again, 0, 'inbox migrate again');
    assert.match(again.stdout, new RegExp(`\`${inbox}\` is up to date`));
    const empty = await runCli(['inbox', 'status', '--inbox-table', inbox], env);
    expectExit(empty, 0, 'inbox status, empty');
    assert.match(empty.stdout, /no events received yet/);

    const e = await fillInbox(inbox);
    const [status, statusJson, dead, deadJson, held] = await Promise.all([
      runCli(['inbox', 'status', '--inbox-table', inbox], env),
      runCli(['inbox', 'status', '--json', '--inbox-table', inbox], env),
      runCli(['inbox', 'dead', 'list', '--inbox-table', inbox], env),
      runCli(['inbox', 'dead', 'list', '--json', '--consumer', 'stock', '--limit', '1', '--inbox-table', inbox], env),
      runCli(['inbox', 'held', 'list', '--inbox-table', inbox], env),
    ]);
    expectExit(status, 0, 'inbox status');
    assert.match(status.stdout, /stock: processed 5 \(5 in the last minute\), failed 0, held 1, dead 2, retry 0, last \d{4}-/);
    const consumers = JSON.parse(statusJson.stdout) as { consumer: string; processed: number; dead: number; held: number }[];
    assert.deepEqual(consumers.map((c) => [c.consumer, c.processed, c.dead, c.held]), [['stock', 5, 2, 1]]);
    expectExit(dead, 0, 'dead list');
    assert.match(dead.stdout, new RegExp(`${e.c2.id}  stock  StockChanged  attempts=1\\n    stock must not go negative`));
    assert.ok(dead.stdout.includes(e.loose.id));
    const deadRows = JSON.parse(deadJson.stdout) as { id: string; lastError: string }[];
    assert.equal(deadRows.length, 1, '--limit');
    expectExit(held, 0, 'held list');
    assert.match(held.stdout, new RegExp(`${e.d2.id}  stock  StockChanged  version=2  held since \\d{4}-[^\\n]+\\n    version 2 of Item:d waits for version 1`));

    const [retryDead, discard, retryHeld, missing] = await Promise.all([
      runCli(['inbox', 'dead', 'retry', '--id', e.c2.id.toUpperCase(), '--actor', 'alice', '--inbox-table', inbox], env),
      runCli(['inbox', 'dead', 'discard', '--id', e.loose.id, '--actor', 'bob', '--inbox-table', inbox], env),
      runCli(['inbox', 'held', 'retry', '--all', '--consumer', 'stock', '--actor', 'carol', '--inbox-table', inbox], env),
      runCli(['inbox', 'dead', 'retry', '--id', randomUUID(), '--inbox-table', inbox], env),
    ]);
    expectExit(retryDead, 0, 'dead retry');
    assert.match(retryDead.stdout, /queued for retry: 1 dead event/);
    expectExit(discard, 0, 'dead discard');
    assert.match(discard.stdout, /discarded: 1 dead event/);
    expectExit(retryHeld, 0, 'held retry --all');
    assert.match(retryHeld.stdout, /queued for retry: 1 held event/);
    expectExit(missing, 1, 'retry of an id that is not dead');
    const rows = new Map((await query<{ event_id: string; status: string }>(`SELECT event_id, status FROM \`${inbox}\``)).map((r) => [r.event_id, r.status]));
    assert.deepEqual([rows.get(e.c2.id), rows.get(e.d2.id), rows.has(e.loose.id)], ['retry', 'retry', false]);
    const audit = await query<{ action: string; event_id: string; actor: string }>(`SELECT action, event_id, actor FROM \`${inbox}_audit\` ORDER BY action`);
    assert.deepEqual(
      audit.map((r) => [r.action, r.event_id, r.actor]),
      [['discard', e.loose.id, 'bob'], ['retry', e.c2.id, 'alice'], ['retry-held', e.d2.id, 'carol']],
    );
  });

  it('`txbox prune` on MySQL deletes old published and skipped rows in bounded batches with progress, never pending, parked or recent ones', async () => {
    const table = fresh();
    expectExit(await runCli(['migrate'], envFor(table)), 0, 'migrate');
    const ids = await enqueue(table, Array.from({ length: 20 }, (_, i) => Placed({ aggregateId: `p${i}`, payload: { n: i } })));
    const [oldPublished, oldSkipped, recent, pending, parked] = [ids.slice(0, 11), ids.slice(11, 13), ids.slice(13, 15), ids.slice(15, 18), ids.slice(18)];
    const set = (state: string, age: string, which: string[]) =>
      query(`UPDATE \`${table}\` SET state = ?, done_at = UTC_TIMESTAMP(6) - INTERVAL ${age} WHERE id IN (${which.map(() => '?').join(', ')})`, [state, ...which]);
    await set('published', '2 HOUR', oldPublished);
    await set('skipped', '3 HOUR', oldSkipped);
    await set('published', '1 MINUTE', recent);
    await query(`UPDATE \`${table}\` SET state = 'parked', occurred_at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE id IN (?, ?)`, parked);
    await query(`UPDATE \`${table}\` SET occurred_at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE id IN (?, ?, ?)`, pending);

    const r = await runCli(['prune', '--older-than', '1h', '--batch-size', '4'], envFor(table, { TXBOX_DATABASE_URL: url.replace(/^mysql:/, 'mariadb:') }));
    expectExit(r, 0, 'prune on MySQL');
    assert.match(r.stdout, /^deleted 13 row\(s\)$/m);
    assert.match(r.stderr, /prune: 4 rows deleted/, 'progress after the first batch');
    const left = await query<{ id: string }>(`SELECT id FROM \`${table}\` ORDER BY seq`);
    assert.deepEqual(left.map((x) => x.id), [...recent, ...pending, ...parked]);
    const again = await runCli(['prune', '--older-than', '1h'], envFor(table));
    expectExit(again, 0, 'prune again');
    assert.match(again.stdout, /deleted 0 row\(s\)/);
    const bad = await runCli(['prune', '--older-than', '1h', '--schema', 'billing'], envFor(table));
    expectExit(bad, 2, 'prune --schema on MySQL');
  });

  it('`txbox inbox prune` on MySQL deletes old processed rows in batches and the lock rows of keys without open events', async () => {
    const inbox = `${fresh()}_in`;
    const env = envFor(fresh());
    expectExit(await runCli(['inbox', 'migrate', '--inbox-table', inbox], env), 0, 'inbox migrate');
    const e = await fillInbox(inbox);
    const slots = async () => new Set((await query<{ slot: string }>(`SELECT slot FROM \`${inbox}_keys\``)).map((r) => Number(r.slot)));
    const slot = (k: string) => keySlot('stock', `Item:${k}`);
    // Versioned keys seen: a, c, d (b1 is versioned too). c has a dead event, d a held one.
    assert.deepEqual([...(await slots())].sort(), ['a', 'b', 'c', 'd'].map(slot).sort());
    await query(`UPDATE \`${inbox}\` SET processed_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE event_id IN (?, ?, ?)`, [e.a1.id, e.a2.id, e.b1.id]);

    const r = await runCli(['inbox', 'prune', '--older-than', '1d', '--batch-size', '2', '--inbox-table', inbox], env);
    expectExit(r, 0, 'inbox prune');
    assert.match(r.stdout, /^deleted 3 processed row\(s\)$/m);
    assert.match(r.stdout, new RegExp(`^deleted 2 key lock row\\(s\\) of \`${inbox}_keys\` without open events$`, 'm'));
    assert.match(r.stderr, /inbox prune: 2 processed rows deleted/);
    const left = new Map((await query<{ event_id: string; status: string }>(`SELECT event_id, status FROM \`${inbox}\``)).map((x) => [x.event_id, x.status]));
    assert.deepEqual(
      [...left.keys()].sort(),
      [e.c1.id, e.c2.id, e.d1.id, e.d2.id, e.loose.id].sort(),
      'old processed rows gone; recent processed, dead and held rows kept',
    );
    assert.deepEqual([...(await slots())].sort(), ['c', 'd'].map(slot).sort(), 'the keys with a dead or held event keep their lock rows');

    // A pruned key runs again: its lock row comes back.
    const store = new MysqlInboxStore({ connection, table: inbox });
    const a3 = inboundEvent('a', 3);
    const ran: string[] = [];
    await store.runBatch('stock', [a3], async (_tx, ev) => void ran.push(ev.id));
    assert.deepEqual(ran, [a3.id]);
    assert.ok((await slots()).has(slot('a')));
  });

  it('pruning a lock row is safe while consumers run: it waits for a transaction holding it, and a re-created row still serializes its key', async () => {
    const inbox = `${fresh()}_in`;
    expectExit(await runCli(['inbox', 'migrate', '--inbox-table', inbox], envFor(fresh())), 0, 'inbox migrate');
    const admin = new MysqlInboxAdmin(connection, { table: inbox });
    const slot = keySlot('stock', 'Item:z');
    const lock = `INSERT INTO \`${inbox}_keys\` (slot) VALUES (?) ON DUPLICATE KEY UPDATE slot = slot`; // what MysqlInboxStore.runBatch does
    const open = async () => {
      const c = await pool.getConnection();
      await c.beginTransaction();
      return c;
    };
    const settled = (p: Promise<unknown>) => {
      let done = false;
      void p.then(() => (done = true), () => (done = true));
      return () => done;
    };
    await query(lock, [slot]);

    // 1. An inbox transaction holds the row: the prune's DELETE waits until it commits.
    const holder = await open();
    await holder.query(lock, [slot]);
    const pruning = admin.pruneKeys();
    const pruned = settled(pruning);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(pruned(), false, 'the prune waits for the transaction holding the lock row');
    await holder.commit();
    holder.release();
    assert.equal(await pruning, 1);
    assert.equal((await query(`SELECT slot FROM \`${inbox}_keys\``)).length, 0);

    // 2. The row is gone: two transactions of the key re-create it, and still exclude each other.
    const first = await open();
    await first.query(lock, [slot]);
    const second = await open();
    const secondLock = second.query(lock, [slot]);
    const secondGot = settled(secondLock);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(secondGot(), false, 'the second transaction of the key waits for the first');
    await first.commit();
    first.release();
    await secondLock;
    await second.commit();
    second.release();
    assert.equal((await query(`SELECT slot FROM \`${inbox}_keys\``)).length, 1);
  });

  it('`txbox dashboard` on MySQL over HTTP: token required, Bearer and login session, CSRF, parked and inbox actions audited; --no-auth on loopback only', async () => {
    const table = fresh();
    const inbox = `${table}_in`;
    const env = envFor(table);
    expectExit(await runCli(['migrate'], env), 0, 'migrate');
    expectExit(await runCli(['inbox', 'migrate', '--inbox-table', inbox], env), 0, 'inbox migrate');
    const ids = await enqueue(table, [1, 2, 3].map((n) => Placed({ aggregateId: `d${n}`, payload: { n, secret: `card-${n}` } })));
    await enqueue(table, [Placed({ aggregateId: 'd9', payload: { n: 9 } })]);
    await query(`UPDATE \`${table}\` SET state = 'parked', attempts = 3, last_error = 'HTTP 400' WHERE id IN (?, ?, ?)`, ids);
    const e = await fillInbox(inbox);

    const [noToken, wideNoAuth, missingInbox] = await Promise.all([
      runCli(['dashboard'], env),
      runCli(['dashboard', '--host', '0.0.0.0', '--no-auth'], env),
      runCli(['dashboard', '--no-auth', '--port', '0', '--inbox-table', `${table}_nope`], env),
    ]);
    expectExit(noToken, 2, 'no token');
    assert.match(noToken.stderr, /refuses to start without an access token/);
    expectExit(wideNoAuth, 2, '--no-auth off loopback');
    assert.match(wideNoAuth.stderr, /--no-auth with --host 0\.0\.0\.0: without a token the dashboard binds loopback only/);
    expectExit(missingInbox, 3, 'an --inbox-table that is not migrated');
    assert.match(missingInbox.stderr, /--inbox-table \S+_nope: the txbox inbox tables `\S+_nope` do not exist yet; run `txbox inbox migrate`/);

    const running = startCli(['dashboard', '--port', '0', '--inbox-table', inbox, '--sample-every', '1s'], { ...env, TXBOX_DASHBOARD_TOKEN: TOKEN });
    try {
      await waitFor('the dashboard listens', () => /http:\/\/127\.0\.0\.1:\d+\//.test(running.stdout()) || running.child.exitCode !== null, 30_000);
      const port = Number(/http:\/\/127\.0\.0\.1:(\d+)\//.exec(running.stdout())?.[1] ?? assert.fail(running.stderr()));
      const origin = `http://127.0.0.1:${port}`;
      assert.match(running.stdout(), /access token required/);
      assert.equal((await call(port, 'GET', '/api/state')).status, 401);
      assert.equal((await call(port, 'GET', '/api/state', { authorization: `Bearer ${TOKEN}x` })).status, 401);

      const state = await call(port, 'GET', '/api/state', { authorization: `Bearer ${TOKEN}` });
      assert.equal(state.status, 200, state.body);
      const body = JSON.parse(state.body) as {
        inbox: boolean;
        snapshot: {
          error: string | null;
          status: { destinations: { destination: string; pending: number; parked: number }[]; table: { approxRows: number } };
          circuits: unknown[];
          parked: { id: string; parkedAt: null; lastError: string }[];
          inbox: { consumers: { consumer: string; dead: number; held: number }[]; dead: { id: string }[]; held: { id: string; version: number }[] };
        };
        history: { pending: Record<string, number> }[];
      };
      assert.equal(body.snapshot.error, null);
      assert.deepEqual(body.snapshot.status.destinations.map((d) => [d.destination, d.pending, d.parked]), [['orders', 1, 3]]);
      assert.deepEqual(body.snapshot.circuits, [], 'no circuit open (no relay ran)');
      assert.deepEqual(body.snapshot.parked.map((p) => p.id), ids);
      assert.ok(body.snapshot.parked.every((p) => p.parkedAt === null && p.lastError === 'HTTP 400' && !('payload' in p)));
      assert.doesNotMatch(state.body, /card-1/, 'no payloads unless --show-payloads');
      assert.equal(body.inbox, true);
      assert.deepEqual(body.snapshot.inbox.consumers.map((c) => [c.consumer, c.dead, c.held]), [['stock', 2, 1]]);
      assert.deepEqual(body.snapshot.inbox.held.map((h) => [h.id, h.version]), [[e.d2.id, 2]]);
      assert.equal(body.history[0]!.pending.orders, 1);

      // A browser session: login, the page's CSRF token, a same-origin POST; without the token 403.
      const login = await call(port, 'POST', '/login', { 'content-type': 'application/x-www-form-urlencoded', origin }, `token=${TOKEN}`);
      assert.equal(login.status, 303);
      const cookie = String(login.headers['set-cookie']).split(';')[0]!;
      const page = await call(port, 'GET', '/', { cookie });
      const csrf = /<meta name="txbox-csrf" content="([^"]+)">/.exec(page.body)?.[1] ?? assert.fail('no CSRF token in the page');
      const json = { 'content-type': 'application/json', cookie, origin };
      const forged = await call(port, 'POST', '/api/parked/retry', json, JSON.stringify({ ids: [ids[0]] }));
      assert.equal(forged.status, 403);
      const retried = await call(port, 'POST', '/api/parked/retry', { ...json, 'x-csrf-token': csrf }, JSON.stringify({ ids: [ids[0]] }));
      assert.equal(retried.status, 200, retried.body);
      assert.deepEqual(JSON.parse(retried.body).changed, [ids[0]]);
      const bearer = { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` };
      const skipped = await call(port, 'POST', '/api/parked/skip', bearer, JSON.stringify({ ids: [ids[1]] }));
      assert.equal(skipped.status, 200, skipped.body);
      const deadRetry = await call(port, 'POST', '/api/inbox/dead/retry', bearer, JSON.stringify({ ids: [e.c2.id] }));
      assert.equal(deadRetry.status, 200, deadRetry.body);
      const heldRetry = await call(port, 'POST', '/api/inbox/held/retry', { ...json, 'x-csrf-token': csrf }, JSON.stringify({ ids: [e.d2.id] }));
      assert.equal(heldRetry.status, 200, heldRetry.body);
      const discarded = await call(port, 'POST', '/api/inbox/dead/discard', bearer, JSON.stringify({ ids: [e.loose.id] }));
      assert.deepEqual(JSON.parse(discarded.body).changed, [e.loose.id]);

      const outboxAudit = await query<{ action: string; event_id: string; actor: string }>(`SELECT action, event_id, actor FROM \`${table}_audit\` ORDER BY id`);
      assert.deepEqual(outboxAudit.map((a) => [a.action, a.event_id, a.actor]), [
        ['retry', ids[0], 'dashboard:token@127.0.0.1'],
        ['skip', ids[1], 'dashboard:token@127.0.0.1'],
      ]);
      const inboxAudit = await query<{ action: string; event_id: string; actor: string }>(`SELECT action, event_id, actor FROM \`${inbox}_audit\` ORDER BY id`);
      assert.deepEqual(inboxAudit.map((a) => [a.action, a.event_id, a.actor]), [
        ['retry', e.c2.id, 'dashboard:token@127.0.0.1'],
        ['retry-held', e.d2.id, 'dashboard:token@127.0.0.1'],
        ['discard', e.loose.id, 'dashboard:token@127.0.0.1'],
      ]);
    } finally {
      running.child.kill('SIGTERM');
    }
    const exited = await running.exited;
    expectExit(exited, 0, 'dashboard after SIGTERM');
    assert.ok(!exited.stdout.includes(TOKEN) && !exited.stderr.includes(TOKEN), 'the token is never printed');

    // --no-auth: loopback clients with a loopback Host only; payloads with --show-payloads.
    const open = startCli(['dashboard', '--port', '0', '--no-auth', '--show-payloads', '--inbox-table', inbox], env);
    try {
      await waitFor('the no-auth dashboard listens', () => /http:\/\/127\.0\.0\.1:\d+\//.test(open.stdout()) || open.child.exitCode !== null, 30_000);
      const port = Number(/http:\/\/127\.0\.0\.1:(\d+)\//.exec(open.stdout())?.[1] ?? assert.fail(open.stderr()));
      assert.match(open.stdout(), /no auth: loopback clients only/);
      const state = await call(port, 'GET', '/api/state');
      assert.equal(state.status, 200);
      const parked = (JSON.parse(state.body) as { snapshot: { parked: { payload?: { secret: string } }[] } }).snapshot.parked;
      assert.ok(parked.length === 1 && parked[0]!.payload?.secret === 'card-3', state.body);
      assert.equal((await call(port, 'GET', '/api/state', { host: 'attacker.example' })).status, 403, 'a foreign Host name is refused');
    } finally {
      open.child.kill('SIGTERM');
    }
    expectExit(await open.exited, 0, 'no-auth dashboard after SIGTERM');
  });
});
