/**
 * `enqueue` on MariaDB with input the core accepts but the server would
 * refuse inside the caller's transaction: a payload nested deeper than
 * MariaDB's JSON check reads (32 levels), and a batch whose one INSERT is
 * larger than max_allowed_packet (the server then drops the connection, and
 * the caller's transaction with it). Each is refused before any SQL, or
 * written, and the caller's transaction stays usable.
 * MariaDB at 127.0.0.1:3306 (TXBOX_TEST_MYSQL_URL).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { InvalidEventError, createOutbox, defineEvent, payloadType } from 'txbox';
import { MysqlOutboxStore, migrateMysql, mysqlConnection, mysqlNames } from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';

const Put = defineEvent({ type: 'Put', aggregateType: 'Doc', destination: 'docs', payload: payloadType<unknown>() });
const database = `txbox_mybad_${randomBytes(4).toString('hex')}`;
let pool: mysql.Pool;
const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [Put] });

before(async () => {
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  await root.end();
  pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 4 });
  await migrateMysql(await mysqlConnection({ pool }), mysqlNames());
  await pool.query('CREATE TABLE docs (id VARCHAR(50) PRIMARY KEY) ENGINE = InnoDB');
});
after(async () => {
  await pool.query(`DROP DATABASE \`${database}\``);
  await pool.end();
});

/** Runs `fn` in a transaction that first writes a business row; resolves with what enqueue did and whether the row committed. */
async function inTransaction(id: string, fn: (conn: mysql.PoolConnection) => Promise<unknown>): Promise<{ outcome: unknown; committed: boolean }> {
  const conn = await pool.getConnection();
  let outcome: unknown;
  try {
    await conn.beginTransaction();
    await conn.query('INSERT INTO docs VALUES (?)', [id]);
    outcome = await fn(conn).catch((err: unknown) => err);
    await conn.commit();
  } finally {
    conn.release();
  }
  const [rows] = (await pool.query('SELECT id FROM docs WHERE id = ?', [id])) as unknown as [unknown[]];
  return { outcome, committed: rows.length === 1 };
}

function nested(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? [v] : { a: v };
  return v;
}

it('a payload nested deeper than MariaDB reads is refused before any SQL, naming the payload; 31 levels are written', async () => {
  const deep = await inTransaction('deep', (conn) => outbox.enqueue(conn, Put({ aggregateId: 'deep', payload: nested(32) })));
  assert.ok(deep.outcome instanceof InvalidEventError, `expected a refusal, got ${String(deep.outcome)}`);
  assert.equal(deep.outcome.field, 'event.payload');
  assert.match(deep.outcome.message, /nested 32 levels deep.*at most 31/);
  assert.ok(deep.committed, 'the caller\'s transaction stayed usable');
  const ok = await inTransaction('ok', (conn) => outbox.enqueue(conn, Put({ aggregateId: 'ok', payload: nested(31) })));
  assert.ok(Array.isArray(ok.outcome), String(ok.outcome));
  assert.ok(ok.committed);
});

it('a batch larger than max_allowed_packet in one INSERT is written in several, in order, and the caller\'s transaction commits', async () => {
  const [[limit]] = (await pool.query('SELECT @@max_allowed_packet AS bytes')) as unknown as [[{ bytes: number }]];
  const each = 900_000;
  const count = Math.ceil((Number(limit.bytes) * 1.5) / each);
  const events = Array.from({ length: count }, (_, i) => Put({ aggregateId: `big-${i}`, payload: { i, fill: 'x'.repeat(each) } }));
  const big = await inTransaction('big', (conn) => outbox.enqueue(conn, events));
  assert.ok(Array.isArray(big.outcome), `expected the ids, got ${String(big.outcome)}`);
  assert.ok(big.committed, 'the caller\'s transaction stayed usable');
  const [rows] = (await pool.query("SELECT aggregate_id FROM outbox WHERE aggregate_id LIKE 'big-%' ORDER BY seq")) as unknown as [{ aggregate_id: string }[]];
  assert.deepEqual(rows.map((r) => r.aggregate_id), events.map((_, i) => `big-${i}`));
});
