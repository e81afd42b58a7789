/**
 * The inbox on MariaDB (TXBOX_TEST_MYSQL_URL) beyond the store conformance
 * suite: inbox migrations under GET_LOCK and --print; input MySQL refuses
 * (an id that is not a UUID, a key too long for its column, a constraint on
 * txbox's own row) is dead after bounded tries with the errno in the reason
 * and no quoted value in it, while other events flow; a deadlock between two
 * handlers is retried, not failed; the inbox admin lists, retries and
 * discards dead events (audited), lists and retries held ones, reports
 * status and prunes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { ConfigError, createInbox, uuidv7, type OutboxEvent } from 'txbox';
import {
  MysqlInboxAdmin,
  MysqlInboxStore,
  applyVersioned,
  migrateMysqlInbox,
  mysqlConnection,
  mysqlInboxNames,
  printMysqlInboxMigrations,
  type MysqlConnection,
  type MysqlExecutor,
} from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

function event(overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  return { id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: '1', key: 'Note:1', destination: 'notes', payload: { note: 'hello' }, headers: {}, occurredAt: new Date(), version: null, ...overrides };
}

describe('mysql inbox on MariaDB', () => {
  const database = `txbox_myinbox_${randomBytes(4).toString('hex')}`;
  let root: mysql.Connection;
  let pool: mysql.Pool;
  let connection: MysqlConnection;
  let store: MysqlInboxStore;
  let admin: MysqlInboxAdmin;
  const q = async <R>(sql: string, values: unknown[] = []): Promise<R[]> => (await pool.query(sql, values))[0] as R[];

  before(async () => {
    root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`CREATE DATABASE \`${database}\``);
    pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, dateStrings: true, timezone: 'Z' });
    connection = await mysqlConnection({ pool });
    assert.deepEqual(await migrateMysqlInbox(connection, mysqlInboxNames()), ['001_inbox.sql']);
    store = new MysqlInboxStore({ connection });
    admin = new MysqlInboxAdmin(connection);
    await pool.query('CREATE TABLE notes (event_id CHAR(36) NOT NULL, note VARCHAR(100) NOT NULL) ENGINE = InnoDB');
  });
  after(async () => {
    await pool.end();
    await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await root.end();
  });

  it('inbox migrations: two at once apply each file once under GET_LOCK, a rerun applies nothing; --print names the tables; a bad name is refused naming the field', async () => {
    const a = await mysqlConnection({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`) });
    const b = await mysqlConnection({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`) });
    try {
      const names = mysqlInboxNames({ table: 'billing_inbox' });
      const [x, y] = await Promise.all([migrateMysqlInbox(a, names), migrateMysqlInbox(b, names)]);
      assert.deepEqual([...x, ...y], ['001_inbox.sql']);
      assert.deepEqual(await migrateMysqlInbox(a, names), []);
      const tables = await q<{ t: string }>(`SELECT table_name AS t FROM information_schema.tables WHERE table_schema = ? AND table_name LIKE 'billing_inbox%' ORDER BY 1`, [database]);
      assert.deepEqual(tables.map((r) => r.t), ['billing_inbox', 'billing_inbox_audit', 'billing_inbox_keys', 'billing_inbox_migrations']);
    } finally {
      await a.close();
      await b.close();
    }
    const text = printMysqlInboxMigrations(mysqlInboxNames({ database: 'app' }));
    assert.match(text, /^-- 001_inbox\.sql/);
    assert.match(text, /CREATE TABLE IF NOT EXISTS `app`\.`inbox` \(/);
    assert.match(text, /CREATE TABLE IF NOT EXISTS `app`\.`inbox_keys`/);
    assert.match(text, /CREATE TABLE IF NOT EXISTS `app`\.`inbox_audit`/);
    assert.doesNotMatch(text, /\{\{/);
    assert.throws(() => mysqlInboxNames({ table: 'inbox`; DROP TABLE x' }), (err: unknown) => err instanceof ConfigError && /table/.test(err.message));
    assert.throws(() => new MysqlInboxStore({ connection, database: 'a-b' }), (err: unknown) => err instanceof ConfigError && /database/.test(err.message));
  });

  it('an id that is not a UUID is dead at once naming the field; a key too long for its column is dead after bounded tries with the errno; other events flow', async () => {
    const seen: string[] = [];
    const inbox = createInbox<MysqlExecutor>({ store, consumer: 'refused-input', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 } });
    inbox.on('Noted', async (e, tx) => {
      seen.push(e.id);
      await tx.query('INSERT INTO notes (event_id, note) VALUES (?, ?)', [e.id, 'ok']);
    });
    const badId = await inbox.process(event({ id: 'order-17' }));
    assert.equal(badId.status, 'dead');
    assert.match((badId as { error: string }).error, /^id: "order-17" is not a UUID/);
    const long = event({ key: `Note:${'k'.repeat(1200)}` });
    const statuses: string[] = [];
    for (let i = 0; i < 3; i++) {
      const outcome = await inbox.process(long);
      statuses.push(outcome.status);
      if (outcome.status !== 'processed') assert.match((outcome as { error: string }).error, /MySQL error 1406: Data too long for column 'key'/);
      assert.equal((await inbox.process(event())).status, 'processed', 'other events flow');
    }
    assert.deepEqual(statuses, ['retry', 'retry', 'dead']);
    assert.equal(seen.length, 3, 'only the good events ran');
    const [row] = await q<{ n: number }>(`SELECT count(*) AS n FROM inbox WHERE consumer = 'refused-input' AND status <> 'processed'`);
    assert.equal(Number(row!.n), 0);
  });

  it("a refusal of txbox's own row (a value the column's charset cannot hold, a CHECK, another unique key) is dead after bounded tries, naming the errno and never the value; no other row changes", async () => {
    // A table of its own, altered as no real inbox is: a latin1 key column (MySQL quotes the refused bytes: 1366),
    // a CHECK on the type (4025 on MariaDB, 3819 on MySQL), and a second unique key (ON DUPLICATE KEY UPDATE would meet another event's row).
    await migrateMysqlInbox(connection, mysqlInboxNames({ table: 'strict_inbox' }));
    await pool.query("ALTER TABLE strict_inbox MODIFY `key` VARCHAR(1000) CHARACTER SET latin1 NOT NULL, ADD UNIQUE INDEX one_per_key (consumer, `key`(190)), ADD CONSTRAINT no_refused CHECK (type <> 'Refused')");
    const inbox = createInbox<MysqlExecutor>({ store: new MysqlInboxStore({ connection, table: 'strict_inbox' }), consumer: 'own-row', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 } });
    const ran: string[] = [];
    inbox.on('Noted', (e) => void ran.push(e.id));
    inbox.on('Refused', (e) => void ran.push(e.id));
    const taken = event({ key: 'Customer:taken' });
    assert.equal((await inbox.process(taken)).status, 'processed');
    const refused = {
      charset: event({ key: 'Customer:\u{1F642}secret-name' }),
      check: event({ type: 'Refused', key: 'Note:refused' }),
      diverted: event({ key: 'Customer:taken' }),
    };
    const outcomes = new Map<string, { status: string; error?: string }[]>();
    for (let i = 0; i < 3; i++) {
      for (const [name, e] of Object.entries(refused)) outcomes.set(name, [...(outcomes.get(name) ?? []), (await inbox.process(e)) as { status: string; error?: string }]);
      assert.equal((await inbox.process(event({ key: `Note:other-${i}` }))).status, 'processed', 'other events flow');
    }
    for (const [name, list] of outcomes) assert.deepEqual(list.map((o) => o.status), ['retry', 'retry', 'dead'], name);
    const reason = (name: string): string => outcomes.get(name)![2]!.error!;
    assert.match(reason('charset'), /MySQL error 1366: Incorrect string value: \(value not shown\) for column/);
    // (MySQL quotes the refused bytes as \xF0\x9F...; a bare "F0" could be in the random database's name.)
    assert.ok(!/secret|\\x[0-9a-f]{2}|\u{1F642}/iu.test(reason('charset')), `no bytes of the key in the reason: ${reason('charset')}`);
    assert.match(reason('check'), /MySQL error (4025|3819): /);
    assert.match(reason('diverted'), /MySQL error 1062: the inbox row of event [0-9a-f-]{36} was not written: another unique key of `strict_inbox` matched it/);
    assert.ok(!ran.includes(refused.diverted.id), 'the diverted event is not called a duplicate: it never ran, and is dead, not acked as done');
    const rows = await q<{ event_id: string; status: string; attempts: number; claim: string | null }>(`SELECT event_id, status, attempts FROM strict_inbox WHERE \`key\` = 'Customer:taken'`);
    assert.deepEqual(rows.map((r) => [r.event_id, r.status, Number(r.attempts)]), [[taken.id, 'processed', 1]], 'the row met is unchanged');
  });

  it('two handlers that deadlock each other both commit: the victim transaction is run again, not failed', async () => {
    await pool.query('CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL) ENGINE = InnoDB');
    await pool.query('INSERT INTO accounts VALUES (1, 0), (2, 0)');
    let lockedFirst = 0;
    let bothLocked!: () => void;
    const barrier = new Promise<void>((resolve) => (bothLocked = resolve));
    const runs: string[] = [];
    const inbox = createInbox<MysqlExecutor>({ store, consumer: 'deadlock', autoStart: false, metrics: false, batch: { maxSize: 1, concurrency: 2 }, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 } });
    inbox.on('Transfer', async (e, tx) => {
      const { from, to } = e.payload as { from: number; to: number };
      runs.push(e.aggregateId);
      await tx.query('UPDATE accounts SET balance = balance - 1 WHERE id = ?', [from]);
      if (++lockedFirst === 2) bothLocked();
      await barrier; // each holds its first row; the second update closes the cycle
      await tx.query('UPDATE accounts SET balance = balance + 1 WHERE id = ?', [to]);
    });
    const a = event({ type: 'Transfer', aggregateId: 'a', key: 'Transfer:a', payload: { from: 1, to: 2 } });
    const b = event({ type: 'Transfer', aggregateId: 'b', key: 'Transfer:b', payload: { from: 2, to: 1 } });
    const outcomes = await Promise.all([inbox.process(a), inbox.process(b)]);
    assert.deepEqual(outcomes.map((o) => o.status), ['processed', 'processed'], JSON.stringify(outcomes));
    assert.equal(runs.length, 3, `one of them ran twice: ${runs.join(' ')}`);
    const balances = await q<{ id: number; balance: number }>('SELECT id, balance FROM accounts ORDER BY id');
    assert.deepEqual(balances.map((r) => Number(r.balance)), [0, 0], 'each transfer applied once');
    await pool.query('DROP TABLE accounts');
  });

  it('the inbox admin: dead events listed with their reason, retried (redriven) or discarded, each audited; held events listed and retried; status; prune', async () => {
    const broken = new Set<string>();
    const inbox = createInbox<MysqlExecutor>({ store, consumer: 'admin', autoStart: false, metrics: false, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 1 } });
    await pool.query('CREATE TABLE stock (sku VARCHAR(50) PRIMARY KEY, qty INT NOT NULL, version BIGINT NULL) ENGINE = InnoDB');
    inbox.on('Noted', async (e, tx) => {
      if (broken.has(e.id)) throw new Error(`downstream refused ${e.aggregateId}`);
      await tx.query('INSERT INTO notes (event_id, note) VALUES (?, ?)', [e.id, 'admin']);
    });
    inbox.on('Stock', async (e, tx) => {
      await applyVersioned(tx, { table: 'stock', id: { sku: e.aggregateId }, version: e.version!, values: { qty: (e.payload as { qty: number }).qty }, onGap: 'hold' });
    });
    const [d1, d2] = [event({ aggregateId: 'd1' }), event({ aggregateId: 'd2' })];
    broken.add(d1.id).add(d2.id);
    assert.equal((await inbox.process(d1)).status, 'dead');
    assert.equal((await inbox.process(d2)).status, 'dead');
    const dead = await admin.listDead({ consumer: 'admin' });
    assert.deepEqual(dead.map((d) => [d.id, d.type, d.attempts, d.lastError]), [
      [d1.id, 'Noted', 1, 'downstream refused d1'],
      [d2.id, 'Noted', 1, 'downstream refused d2'],
    ]);
    assert.ok(dead[0]!.receivedAt instanceof Date && Math.abs(dead[0]!.receivedAt.getTime() - Date.now()) < 600_000, `receivedAt in UTC: ${dead[0]!.receivedAt.toISOString()}`);
    broken.clear();
    assert.deepEqual(await admin.retryDead({ ids: [d1.id.toUpperCase()] }, 'ops@example'), [d1.id], 'any spelling of the id');
    assert.deepEqual(await admin.discardDead({ all: true, consumer: 'admin' }, 'ops@example'), [d2.id]);
    assert.equal(await inbox.redrive(), 1);
    assert.deepEqual(await admin.listDead({ consumer: 'admin' }), []);
    const notes = await q<{ event_id: string }>(`SELECT event_id FROM notes WHERE note = 'admin'`);
    assert.deepEqual(notes.map((r) => r.event_id), [d1.id], 'the retried one ran; the discarded one is gone');
    const audit = await q<{ action: string; event_id: string; actor: string; detail: string }>('SELECT action, event_id, actor, detail FROM inbox_audit ORDER BY id');
    assert.deepEqual(audit.map((r) => [r.action, r.event_id, r.actor, r.detail]), [
      ['retry', d1.id, 'ops@example', 'downstream refused d1'],
      ['discard', d2.id, 'ops@example', 'downstream refused d2'],
    ]);
    // Held: v3 waits for v2; an operator retry runs it again (still held while v2 is missing).
    const stock = (v: number) => event({ type: 'Stock', aggregateType: 'Sku', aggregateId: 'sku-1', key: 'Sku:sku-1', payload: { qty: v }, version: v });
    assert.equal((await inbox.process(stock(1))).status, 'processed');
    const v3 = stock(3);
    assert.equal((await inbox.process(v3)).status, 'held');
    const held = await admin.listHeld({ consumer: 'admin' });
    assert.deepEqual(held.map((h) => [h.id, h.version]), [[v3.id, 3]]);
    assert.match(held[0]!.lastError ?? '', /waits for version 2/);
    assert.ok(held[0]!.heldAt instanceof Date);
    assert.deepEqual(await admin.retryHeld({ all: true, consumer: 'admin' }, 'ops@example'), [v3.id]);
    assert.equal(await inbox.redrive(), 1);
    assert.deepEqual((await admin.listHeld({ consumer: 'admin' })).map((h) => h.id), [v3.id], 'held again: v2 is still missing');
    assert.equal((await inbox.process(stock(2))).status, 'processed');
    const [row] = await q<{ qty: number; version: string }>(`SELECT qty, version FROM stock WHERE sku = 'sku-1'`);
    assert.deepEqual([Number(row!.qty), Number(row!.version)], [3, 3], 'v2 released the held v3');
    const status = (await admin.status()).find((s) => s.consumer === 'admin')!;
    assert.deepEqual([status.processed, status.dead, status.held, status.retry], [4, 0, 0, 0]);
    assert.ok(status.processedLastMinute >= 4 && status.lastProcessedAt instanceof Date);
    assert.equal(await admin.prune(3_600_000), 0, 'nothing processed an hour ago');
    await new Promise((r) => setTimeout(r, 5));
    const before = (await admin.status()).reduce((n, s) => n + s.processed, 0);
    assert.equal(await admin.prune(1, 2), before, 'every processed row, two at a time');
    await assert.rejects(admin.listDead({ limit: 0 }), (err: unknown) => err instanceof ConfigError && /limit/.test(err.message));
    await pool.query('DROP TABLE stock');
  });

  it('prune does not wait for an inbox transaction in progress (on a small table the delete would scan and wait for its uncommitted row)', async () => {
    const inbox = createInbox<MysqlExecutor>({ store, consumer: 'prunelock', autoStart: false, metrics: false, batch: { maxSize: 1, concurrency: 1 } });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    inbox.on('Noted', async (e) => {
      if (e.aggregateId === 'slow') await gate;
    });
    for (let i = 0; i < 20; i++) assert.equal((await inbox.process(event({ aggregateId: `p${i}` }))).status, 'processed');
    await pool.query("UPDATE inbox SET processed_at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE consumer = 'prunelock'");
    const slow = inbox.process(event({ aggregateId: 'slow' })); // its inbox row is written, its handler waits
    try {
      await new Promise((r) => setTimeout(r, 300));
      const pruning = admin.prune(60_000);
      const done = await Promise.race([pruning, new Promise<'stuck'>((r) => setTimeout(r, 3000, 'stuck'))]);
      assert.notEqual(done, 'stuck', 'prune waited for the inbox transaction');
      assert.ok((done as number) >= 20, String(done));
    } finally {
      release();
      await slow;
      await inbox.stop?.();
    }
  });

  it('the held re-check picks keys with held events not looked at lately, once each, and stamps them', async () => {
    const held = [event({ key: 'K:1', version: 5 }), event({ key: 'K:1', version: 6 }), event({ key: 'K:2', version: 3 })];
    for (const e of held) await store.hold('recheck', e, 'waits');
    assert.deepEqual((await store.recheckHeld('recheck', 0, 100)).sort(), ['K:1', 'K:2']);
    assert.deepEqual(await store.recheckHeld('recheck', 3_600_000, 100), [], 'just stamped');
    const redrivable = await store.redrivable('recheck', 10, 'K:1');
    assert.deepEqual(redrivable.map((e) => [e.id, e.version]), [[held[0]!.id, 5], [held[1]!.id, 6]], 'in version order');
    assert.ok(redrivable[0]!.occurredAt instanceof Date);
  });
});
