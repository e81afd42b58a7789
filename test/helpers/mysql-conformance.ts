/**
 * The store conformance suite's namespace on MariaDB/MySQL at 127.0.0.1:3306
 * (TXBOX_TEST_MYSQL_URL): a fresh database per run, the outbox migrated, an
 * effects table. Imported from the source (src/stores/mysql), as the store
 * is not a package subpath yet.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import type { StoreConformanceNamespace } from 'txbox/testing/conformance';
import { MysqlAdmin, MysqlOutboxStore, MysqlRelayStore, migrateMysql, mysqlConnection, mysqlNames, type MysqlExecutor } from '../../src/stores/mysql/index.ts';

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
  await pool.query('CREATE TABLE effects (note VARCHAR(200) NOT NULL) ENGINE = InnoDB');
  const admin = new MysqlAdmin(connection);
  const open: mysql.PoolConnection[] = [];
  return {
    outboxStore: new MysqlOutboxStore(),
    relayStore: () => new MysqlRelayStore({ connection }),
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
    async close() {
      for (const c of open) c.release();
      await pool.end();
      const drop = await mysql.createConnection({ uri: MYSQL_URL });
      await drop.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await drop.end();
    },
  };
}
