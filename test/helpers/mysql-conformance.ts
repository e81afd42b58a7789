/**
 * The store conformance suite's namespace on MariaDB/MySQL at 127.0.0.1:3306
 * (TXBOX_TEST_MYSQL_URL): a fresh database per run, the outbox and the inbox
 * migrated, an effects table and a read model, through `txbox/mysql`.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import type { StoreConformanceNamespace } from 'txbox/testing/conformance';
import {
  MysqlAdmin,
  MysqlInboxAdmin,
  MysqlInboxStore,
  MysqlOutboxStore,
  MysqlRelayStore,
  applyVersioned,
  migrateMysql,
  migrateMysqlInbox,
  mysqlConnection,
  mysqlInboxNames,
  mysqlNames,
  type MysqlExecutor,
} from 'txbox/mysql';

export const MYSQL_URL = process.env.TXBOX_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

export async function openMysqlNamespace(helper: string): Promise<StoreConformanceNamespace<MysqlExecutor>> {
  const database = `txbox_${helper}_${randomBytes(4).toString('hex')}`;
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  await root.end();
  const uri = MYSQL_URL.replace(/\/[^/]*$/, `/${database}`);
  const pool = mysql.createPool({ uri, connectionLimit: 8, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' });
  const connection = await mysqlConnection({ pool });
  await migrateMysql(connection, mysqlNames());
  await migrateMysqlInbox(connection, mysqlInboxNames());
  await pool.query('CREATE TABLE effects (note VARCHAR(200) NOT NULL) ENGINE = InnoDB');
  await pool.query('CREATE TABLE stock_view (id VARCHAR(100) NOT NULL PRIMARY KEY, quantity INT NOT NULL, version BIGINT NOT NULL) ENGINE = InnoDB');
  const admin = new MysqlAdmin(connection);
  const inboxAdmin = new MysqlInboxAdmin(connection);
  const open: mysql.PoolConnection[] = [];
  return {
    outboxStore: new MysqlOutboxStore(),
    relayStore: () => new MysqlRelayStore({ connection }),
    inboxStore: new MysqlInboxStore({ connection }),
    transaction: (fn) => connection.transaction(fn),
    async openTransaction() {
      const conn = await pool.getConnection();
      open.push(conn);
      await conn.beginTransaction();
      return {
        tx: conn,
        async commit() {
          await conn.commit();
          conn.release();
          open.splice(open.indexOf(conn), 1);
        },
      };
    },
    async rows() {
      const [rows] = (await pool.query('SELECT id, `key`, state, attempts, last_error FROM outbox ORDER BY seq')) as unknown as [
        { id: string; key: string; state: 'pending'; attempts: number; last_error: string | null }[],
      ];
      return rows.map((r) => ({ id: r.id, key: r.key, state: r.state, attempts: Number(r.attempts), lastError: r.last_error }));
    },
    retryParked: (ids) => admin.retryParked(ids, 'conformance'),
    skipParked: (ids) => admin.skipParked(ids, 'conformance'),
    replay: async (destination) => (await admin.replay({ destination }, 'conformance')).copied,
    async recordEffect(tx, note) {
      await tx.query('INSERT INTO effects (note) VALUES (?)', [note]);
    },
    async countEffects(note) {
      const [rows] = (await pool.query('SELECT count(*) AS n FROM effects WHERE note = ?', [note])) as unknown as [{ n: string | number }[]];
      return Number(rows[0]!.n);
    },
    async applyVersioned(tx, row) {
      const r = await applyVersioned(tx, { table: 'stock_view', id: { id: row.id }, version: row.version, values: { quantity: row.quantity }, onGap: row.onGap });
      return r.status === 'gap' ? { status: 'gap', missing: r.missing } : { status: r.status };
    },
    async readProjection(id) {
      const [rows] = (await pool.query('SELECT quantity, version FROM stock_view WHERE id = ?', [id])) as unknown as [{ quantity: number; version: string }[]];
      return rows[0] ? { quantity: Number(rows[0].quantity), version: Number(rows[0].version) } : null;
    },
    listDead: async (consumer) => (await inboxAdmin.listDead({ consumer })).map((d) => d.id),
    retryDead: (consumer) => inboxAdmin.retryDead({ all: true, consumer }, 'conformance'),
    async close() {
      for (const c of open) c.release();
      await pool.end();
      const drop = await mysql.createConnection({ uri: MYSQL_URL });
      await drop.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await drop.end();
    },
  };
}

/** A fresh MariaDB/MySQL database with the inbox migrated: its pool, connection and inbox store; `close` drops it. */
export async function openMysqlInbox(prefix: string): Promise<{ pool: mysql.Pool; store: MysqlInboxStore; close(): Promise<void> }> {
  const database = `txbox_${prefix}_${randomBytes(4).toString('hex')}`;
  const root = await mysql.createConnection({ uri: MYSQL_URL });
  await root.query(`CREATE DATABASE \`${database}\``);
  const pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, dateStrings: true, timezone: 'Z' });
  const connection = await mysqlConnection({ pool });
  await migrateMysqlInbox(connection, mysqlInboxNames());
  return {
    pool,
    store: new MysqlInboxStore({ connection }),
    close: async () => {
      await pool.end();
      await root.query(`DROP DATABASE \`${database}\``);
      await root.end();
    },
  };
}
