/**
 * `txbox demo` on MySQL or MariaDB (a mysql:// or mariadb:// URL): the same
 * order service, relay and inventory service as on PostgreSQL, through
 * txbox/mysql. Its tables are prefixed `txbox_demo_<id>_` in the URL's
 * database and dropped at the end.
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import { createOutbox } from '../../core/outbox.ts';
import { createInbox } from '../../inbox/inbox.ts';
import type { MysqlConnection, MysqlExecutor } from '../../stores/mysql/mysql-connection.ts';
import { MysqlInboxStore } from '../../stores/mysql/mysql-inbox-store.ts';
import { migrateMysql, migrateMysqlInbox } from '../../stores/mysql/mysql-migrations.ts';
import { MysqlOutboxStore } from '../../stores/mysql/mysql-outbox-store.ts';
import { applyVersioned } from '../../stores/mysql/mysql-projection.ts';
import { MysqlRelayStore } from '../../stores/mysql/mysql-relay-store.ts';
import { mysqlInboxNames, mysqlNames } from '../../stores/mysql/mysql-sql.ts';
import { CliError, EXIT, redactUrl } from '../cli-error.ts';
import { importOptional } from '../optional-import.ts';
import type { DemoBackend } from './demo-backend.ts';
import { OrderCreated, PaymentCaptured, RolledBack, type CommittedEvent } from './order-service.ts';

/** MySQL's error numbers for a login refused (1045), an unknown database (1049), access denied to it (1044). */
function connectProblem(err: unknown, where: string): string {
  const errno = (err as { errno?: unknown }).errno;
  if (errno === 1045) return `the database at ${where} was reached but refused the login`;
  if (errno === 1049) return `the database server at ${where} has no such database`;
  if (errno === 1044) return `the database server at ${where} refused access to that database`;
  return `cannot reach the database at ${where}`;
}

export async function openMysqlDemo(url: string, id: string): Promise<DemoBackend> {
  const { default: mysql } = await importOptional('the demo on MySQL', () => import('mysql2/promise'));
  const { mysqlConnection } = await import('../../stores/mysql/mysql-connection.ts');
  const pool = mysql.createPool({ uri: url, connectionLimit: 12, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, timezone: 'Z' });
  try {
    await pool.query('SELECT 1');
  } catch (err) {
    await pool.end().catch(() => {});
    throw new CliError(`${connectProblem(err, redactUrl(url))}: ${(err as Error).message}`, EXIT.database);
  }
  const db: MysqlConnection = await mysqlConnection({ pool });
  const prefix = `txbox_demo_${id}_`;
  const outboxNames = mysqlNames({ table: `${prefix}outbox` });
  const inboxNames = mysqlInboxNames({ table: `${prefix}inbox` });
  const t = { orders: `\`${prefix}orders\``, payments: `\`${prefix}payments\``, view: `${prefix}order_view` };
  const outbox = createOutbox({ store: new MysqlOutboxStore({ table: outboxNames.table }), events: [OrderCreated, PaymentCaptured] });
  let duplicatesSkipped = 0;
  let gapsHeld = 0;
  const inbox = createInbox({ store: new MysqlInboxStore({ connection: db, table: inboxNames.table }), consumer: 'inventory', retry: { baseDelayMs: 50, maxDelayMs: 1000 } });
  inbox.on(OrderCreated, async (e, tx) => {
    await applyVersioned(tx, { table: t.view, id: { order_id: e.payload.orderId }, version: e.version ?? 1, values: { total: e.payload.total, paid: 0 }, onGap: 'hold' });
  });
  inbox.on(PaymentCaptured, async (e, tx) => {
    await applyVersioned(tx, { table: t.view, id: { order_id: e.payload.orderId }, version: e.version!, values: { paid: e.payload.paidTotal }, onGap: 'hold' });
  });
  inbox.events.on('duplicate', () => duplicatesSkipped++);
  inbox.events.on('held', () => gapsHeld++);
  const rows = async <R>(tx: MysqlExecutor, sql: string, values: unknown[]): Promise<R[]> => (await tx.query(sql, values))[0] as R[];

  return {
    label: 'MySQL/MariaDB',
    async setup() {
      await migrateMysql(db, outboxNames);
      await migrateMysqlInbox(db, inboxNames);
      await db.query(`CREATE TABLE ${t.orders} (id VARCHAR(20) PRIMARY KEY, customer VARCHAR(50) NOT NULL, total DECIMAL(12,2) NOT NULL, paid DECIMAL(12,2) NOT NULL DEFAULT 0, version INT NOT NULL) ENGINE = InnoDB`);
      await db.query(`CREATE TABLE ${t.payments} (id CHAR(36) PRIMARY KEY, order_id VARCHAR(20) NOT NULL, amount DECIMAL(12,2) NOT NULL, FOREIGN KEY (order_id) REFERENCES ${t.orders} (id)) ENGINE = InnoDB`);
      await db.query(`CREATE TABLE \`${t.view}\` (order_id VARCHAR(20) PRIMARY KEY, total DECIMAL(12,2) NULL, paid DECIMAL(12,2) NOT NULL DEFAULT 0, version BIGINT NOT NULL) ENGINE = InnoDB`);
    },
    relayStore: () => new MysqlRelayStore({ connection: db, table: outboxNames.table }),
    createOrder(orderId, customer, total, rollback): Promise<CommittedEvent> {
      return db.transaction(async (tx) => {
        await tx.query(`INSERT INTO ${t.orders} (id, customer, total, version) VALUES (?, ?, ?, 1)`, [orderId, customer, total]);
        const [id] = await outbox.enqueue(tx, OrderCreated({ aggregateId: orderId, version: 1, payload: { orderId, customer, total } }));
        if (rollback) throw new RolledBack();
        return { id: id!, key: `Order:${orderId}`, version: 1 };
      });
    },
    capturePayment(orderId, paymentId, amount, rollback): Promise<CommittedEvent> {
      return db.transaction(async (tx) => {
        const [row] = await rows<{ version: number; paid: string }>(tx, `SELECT version, paid FROM ${t.orders} WHERE id = ? FOR UPDATE`, [orderId]);
        const version = Number(row!.version) + 1;
        const paidTotal = Number(row!.paid) + amount;
        await tx.query(`UPDATE ${t.orders} SET paid = paid + ?, version = ? WHERE id = ?`, [amount, version, orderId]);
        await tx.query(`INSERT INTO ${t.payments} (id, order_id, amount) VALUES (?, ?, ?)`, [paymentId, orderId, amount]);
        const [id] = await outbox.enqueue(tx, PaymentCaptured({ aggregateId: orderId, version, payload: { orderId, paymentId, amount, paidTotal } }));
        if (rollback) throw new RolledBack();
        return { id: id!, key: `Order:${orderId}`, version };
      });
    },
    async deliver(event: OutboxEvent) {
      const outcome = await inbox.process(event);
      if (outcome.status === 'retry') throw new Error(`inventory handler failed: ${outcome.error}`);
    },
    async check() {
      // No FULL JOIN on MySQL: orders against the view, then view rows without an order.
      const [r] = await db.query<{ orders: string; mismatched: string }>(
        `SELECT count(*) AS orders,
                COALESCE(SUM(v.order_id IS NULL OR NOT (v.total <=> o.total) OR v.paid <> o.paid OR v.version <> o.version), 0) AS mismatched
         FROM ${t.orders} o LEFT JOIN \`${t.view}\` v ON v.order_id = o.id`,
      );
      const [p] = await db.query<{ phantom: string }>(`SELECT count(*) AS phantom FROM \`${t.view}\` v LEFT JOIN ${t.orders} o ON o.id = v.order_id WHERE o.id IS NULL`);
      return { orders: Number(r!.orders), mismatched: Number(r!.mismatched), phantom: Number(p!.phantom), duplicatesSkipped, gapsHeld };
    },
    async close() {
      inbox.stop();
      const tables = [
        t.payments,
        t.orders,
        `\`${t.view}\``,
        ...[outboxNames.outbox, outboxNames.buckets, outboxNames.relays, outboxNames.audit, outboxNames.migrations],
        ...[inboxNames.inbox, inboxNames.keys, inboxNames.audit, inboxNames.migrations],
      ];
      for (const table of tables) await db.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
      await pool.end();
    },
  };
}
