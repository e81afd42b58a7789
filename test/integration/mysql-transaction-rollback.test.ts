/**
 * A statement InnoDB chose as a deadlock victim rolls back its whole
 * transaction; a caller that catches the error and goes on then runs its
 * later statements in autocommit, and COMMIT succeeds on nothing. The
 * connection's `transaction()` must reject then, or a caller takes rolled
 * back work for committed: the inbox acked an event whose inbox row and
 * earlier writes were gone (the later ones committed on their own).
 * MariaDB at 127.0.0.1:3306 (TXBOX_TEST_MYSQL_URL).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createInbox, TransactionRolledBackError, uuidv7, type OutboxEvent } from 'txbox';
import { MysqlInboxStore, migrateMysqlInbox, mysqlConnection, mysqlInboxNames, type MysqlConnection } from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

const database = `txbox_dl_${randomBytes(4).toString('hex')}`;
let pool: mysql.Pool;
let connection: MysqlConnection;

before(async () => {
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  await root.end();
  pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' });
  connection = await mysqlConnection({ pool });
  await migrateMysqlInbox(connection, mysqlInboxNames());
  await pool.query('CREATE TABLE effects (note VARCHAR(100) NOT NULL) ENGINE = InnoDB');
  await pool.query('CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL) ENGINE = InnoDB');
  await pool.query('CREATE TABLE bulk (id INT PRIMARY KEY) ENGINE = InnoDB');
});
after(async () => {
  await pool.query(`DROP DATABASE \`${database}\``);
  await pool.end();
});

/**
 * Makes `tx` a deadlock victim: another transaction, heavier (2,000 rows
 * written, so InnoDB rolls back `tx`), locks row 2 and waits for row 1, which
 * `tx` holds; `tx` then asks for row 2. Resolves with the error `tx` got.
 */
async function deadlockVictim(tx: { query(sql: string, values?: unknown[]): Promise<unknown> }): Promise<{ errno?: number }> {
  await pool.query('DELETE FROM acct');
  await pool.query('DELETE FROM bulk');
  await pool.query('INSERT INTO acct VALUES (1, 0), (2, 0)');
  await tx.query('UPDATE acct SET v = v + 1 WHERE id = 1');
  const other = await pool.getConnection();
  try {
    await other.beginTransaction();
    await other.query('UPDATE acct SET v = v + 1 WHERE id = 2');
    await other.query('INSERT INTO bulk SELECT seq FROM seq_1_to_2000');
    const waiting = other.query('UPDATE acct SET v = v + 1 WHERE id = 1');
    await new Promise((r) => setTimeout(r, 200));
    const got = await tx.query('UPDATE acct SET v = v + 1 WHERE id = 2').then(
      () => ({}),
      (err: { errno?: number }) => err,
    );
    await waiting;
    await other.rollback();
    return got;
  } finally {
    other.release();
  }
}

it('transaction() rejects when a caught deadlock rolled the transaction back, and what came after is not committed on its own', async () => {
  let seen: { errno?: number } = {};
  await assert.rejects(
    connection.transaction(async (tx) => {
      await tx.query("INSERT INTO effects VALUES ('tx-before')");
      seen = await deadlockVictim(tx); // caught: "retry later, carry on"
      await tx.query("INSERT INTO effects VALUES ('tx-after')");
    }),
    (err: unknown) => err instanceof TransactionRolledBackError && err.code === 'TXBOX_ROLLED_BACK',
  );
  assert.equal(seen.errno, 1213, 'the transaction was the deadlock victim');
  const [rows] = (await pool.query("SELECT note FROM effects WHERE note LIKE 'tx-%'")) as unknown as [{ note: string }[]];
  assert.deepEqual(rows, [], 'neither the write before the deadlock nor the one after it');
});

it('the inbox does not report an event processed whose transaction a caught deadlock rolled back', async () => {
  const inbox = createInbox({ store: new MysqlInboxStore({ connection }), consumer: 'dl', autoStart: false, batch: { maxSize: 1, concurrency: 1 } });
  let first = true;
  inbox.on('Changed', async (e, tx) => {
    await tx.query('INSERT INTO effects VALUES (?)', [`inbox-${e.id}`]);
    if (first) {
      first = false;
      await deadlockVictim(tx);
    }
  });
  const event: OutboxEvent = { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: '1', key: 'Item:1', destination: 'items', payload: {}, headers: {}, occurredAt: new Date(), version: null };
  const outcome = await inbox.process(event).catch((err: Error) => ({ status: `threw: ${err.message}` }));
  const [rows] = (await pool.query('SELECT note FROM effects WHERE note = ?', [`inbox-${event.id}`])) as unknown as [{ note: string }[]];
  if (outcome.status === 'processed') assert.equal(rows.length, 1, 'reported processed, but its write is not committed');
  const [inboxRows] = (await pool.query("SELECT status FROM inbox WHERE consumer = 'dl'")) as unknown as [{ status: string }[]];
  if (outcome.status === 'processed') assert.deepEqual(inboxRows.map((r) => r.status), ['processed']);
  await inbox.stop?.();
});
