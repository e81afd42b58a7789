import { InvalidEventError } from '../../core/errors.ts';
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
 * The most one INSERT of `enqueue` carries, by an upper bound of its bytes on
 * the wire: under the smallest default max_allowed_packet (4 MiB, MySQL 5.7;
 * 16 MiB on MariaDB, 64 MiB on MySQL 8) with room for one more event of the
 * default `maxPayloadBytes` (1 MiB).
 */
export const MAX_STATEMENT_BYTES = 3 * 1024 * 1024;

/** An upper bound of one row's bytes in the statement: 3 bytes per UTF-16 unit covers UTF-8 and escaping. */
function rowBytes(e: PreparedEvent): number {
  let chars = e.payloadJson.length + e.type.length + e.aggregateType.length + 2 * e.key.length + e.aggregateId.length + e.destination.length;
  for (const [name, value] of Object.entries(e.headers)) chars += name.length + value.length + 6;
  return 3 * chars + 200;
}

/** MariaDB's json_valid (the columns' CHECK) reads JSON nested at most 31 levels deep; MySQL 8's limit is 100. */
export const MAX_JSON_NESTING = 31;

/** Refuses a payload nested deeper than `MAX_JSON_NESTING`: the CHECK would fail inside the caller's transaction. */
function checkNesting(field: string, json: string): void {
  // Nesting deeper than the limit needs that many brackets opened and closed: most payloads are not scanned at all.
  if (json.length < 2 * (MAX_JSON_NESTING + 1)) return;
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \\ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > deepest) deepest = depth;
    } else if (c === 93 /* ] */ || c === 125 /* } */) depth--;
  }
  if (deepest > MAX_JSON_NESTING) {
    throw new InvalidEventError(field, `is nested ${deepest} levels deep; MySQL and MariaDB store JSON nested at most ${MAX_JSON_NESTING} levels (MariaDB's json_valid): flatten it`);
  }
}

/**
 * The write side of a MySQL or MariaDB outbox table: one INSERT per
 * `enqueue` call (several for a batch over `MAX_STATEMENT_BYTES`), through the caller's own `mysql2` connection inside its
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

  /**
   * Checks every event first (before any SQL, so a refusal leaves the
   * caller's transaction usable), then inserts them in order, in as few
   * statements as keep each under `MAX_STATEMENT_BYTES`: one statement over
   * the server's max_allowed_packet makes it drop the connection, and the
   * caller's transaction with it.
   */
  async insert(tx: MysqlExecutor, events: readonly PreparedEvent[]): Promise<void> {
    if (events.length === 0) return;
    events.forEach((e, i) => checkNesting(events.length === 1 ? 'event.payload' : `events[${i}].payload`, e.payloadJson));
    let params: unknown[] = [];
    let rows = 0;
    let bytes = 0;
    for (const e of events) {
      const size = rowBytes(e);
      if (rows > 0 && bytes + size > MAX_STATEMENT_BYTES) {
        await tx.query(insertEventsSql(this.names, rows), params);
        params = [];
        rows = 0;
        bytes = 0;
      }
      params.push(e.id, e.type, e.aggregateType, e.aggregateId, e.key, e.key, e.destination, e.payloadJson, JSON.stringify(e.headers), utcDatetime(e.occurredAt), e.version === null ? null : String(e.version));
      rows++;
      bytes += size;
    }
    await tx.query(insertEventsSql(this.names, rows), params);
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
