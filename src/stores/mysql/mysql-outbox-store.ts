import type { OutboxStore, PreparedEvent, TransactionProblem } from '../../core/ports.ts';
import type { MysqlExecutor } from './mysql-connection.ts';
import { insertEventsSql, mysqlNames, type MysqlNames, type MysqlNamesOptions } from './mysql-sql.ts';

export type MysqlOutboxStoreOptions = MysqlNamesOptions;

/** Set by mysqlFromKysely / mysqlFromKnex / mysqlFromDrizzle on an executor that wraps no transaction (a Kysely or Knex instance, a Drizzle database). */
const NOT_A_TRANSACTION = Symbol.for('txbox.notATransaction');

/** `occurredAt` as DATETIME(6) text in UTC, whatever the session's time zone. */
export function utcDatetime(d: Date): string {
  return d.toISOString().replace('T', ' ').replace('Z', '');
}

/**
 * The write side of a MySQL or MariaDB outbox table: one INSERT per
 * `enqueue` call, through the caller's own `mysql2` connection inside its
 * transaction. Relays find events by polling (MySQL has no NOTIFY).
 *
 * @example
 * const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [OrderCreated] });
 * const conn = await pool.getConnection();
 * await conn.beginTransaction();
 * await outbox.enqueue(conn, OrderCreated({ aggregateId: id, payload }));
 * await conn.commit();
 */
export class MysqlOutboxStore implements OutboxStore<MysqlExecutor> {
  readonly names: MysqlNames;

  constructor(options: MysqlOutboxStoreOptions = {}) {
    this.names = mysqlNames(options);
  }

  async insert(tx: MysqlExecutor, events: readonly PreparedEvent[]): Promise<void> {
    if (events.length === 0) return;
    const params: unknown[] = [];
    for (const e of events) {
      params.push(e.id, e.type, e.aggregateType, e.aggregateId, e.key, e.key, e.destination, e.payloadJson, JSON.stringify(e.headers), utcDatetime(e.occurredAt), e.version === null ? null : String(e.version));
    }
    await tx.query(insertEventsSql(this.names, events.length), params);
  }

  /** A mysql2 connection (not a pool: each query of a pool may run on another connection, in autocommit), or a Kysely/Knex/Drizzle transaction through `mysqlFromKysely` / `mysqlFromKnex` / `mysqlFromDrizzle`. */
  checkTransaction(tx: unknown): TransactionProblem | undefined {
    const t = tx as { query?: unknown; getConnection?: unknown; release?: unknown; beginTransaction?: unknown };
    if (typeof t.query !== 'function' || typeof t.beginTransaction !== 'function') {
      return { kind: 'invalid', message: 'is not a mysql2 connection: pass the mysql2/promise connection you called beginTransaction() on' };
    }
    const mark = (tx as Record<symbol, unknown>)[NOT_A_TRANSACTION];
    if (typeof mark === 'string') return { kind: 'autocommit', message: mark };
    if (typeof t.getConnection === 'function' && typeof t.release !== 'function') {
      return {
        kind: 'autocommit',
        message: 'is a mysql2 Pool, not a transaction: each query may run on another connection in autocommit, so the events would commit even if your business transaction rolls back. Take a connection (await pool.getConnection()), call beginTransaction() on it, pass it to enqueue, then commit() and release() it',
      };
    }
    return undefined;
  }
}
