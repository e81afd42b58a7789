/**
 * Kysely, Knex and Drizzle transactions on MySQL or MariaDB as a `MysqlExecutor`, so
 * that `enqueue` writes through the query builder's own transaction. txbox
 * imports neither library: each adapter is typed by the shape it needs.
 */
import type { MysqlExecutor } from './mysql-connection.ts';

/** The mark `enqueue` reads (the same symbol as the PostgreSQL adapters' in src/core/executors.ts): why the object is not a transaction. */
const NOT_A_TRANSACTION = Symbol.for('txbox.notATransaction');

const HOW = 'the events would be written in autocommit and commit even if your business transaction rolls back';

function adapted(query: MysqlExecutor['query'], notATransaction: string | undefined): MysqlExecutor {
  const executor: MysqlExecutor = {
    query,
    // The wrapped transaction is open already; enqueue never begins one.
    beginTransaction: () => Promise.reject(new Error('txbox: this executor wraps a transaction that is already open')),
  };
  if (notATransaction !== undefined) Object.defineProperty(executor, NOT_A_TRANSACTION, { value: notATransaction });
  return executor;
}

/**
 * A Kysely transaction on MySQL (Kysely's `MysqlDialect`). Pass Kysely's `CompiledQuery` too.
 * @example
 * import { CompiledQuery } from 'kysely';
 * await db.transaction().execute(async (trx) => { ...; await outbox.enqueue(mysqlFromKysely(trx, CompiledQuery), event); });
 */
export function mysqlFromKysely(
  trx: { executeQuery(query: never): Promise<{ rows: unknown[] }>; readonly isTransaction?: boolean },
  compiledQuery: { raw(sql: string, parameters?: unknown[]): unknown },
): MysqlExecutor {
  return adapted(
    async (sql, values) => [(await trx.executeQuery(compiledQuery.raw(sql, values ?? []) as never)).rows, undefined],
    trx.isTransaction === false
      ? `is a Kysely instance, not a transaction: ${HOW}. Use await db.transaction().execute(async (trx) => { ...; await outbox.enqueue(mysqlFromKysely(trx, CompiledQuery), event); })`
      : undefined,
  );
}

/**
 * A Knex transaction on MySQL (`client: 'mysql2'`): `await knex.transaction(async (trx) => ...)`.
 * txbox's statements use `?` placeholders only (never Knex's `??` identifier bindings).
 * @example
 * await knex.transaction(async (trx) => { ...; await outbox.enqueue(mysqlFromKnex(trx), event); });
 */
export function mysqlFromKnex(trx: { raw(sql: string, bindings: readonly unknown[]): PromiseLike<unknown>; readonly isTransaction?: boolean }): MysqlExecutor {
  return adapted(
    async (sql, values) => {
      // Knex's mysql2 client resolves raw() with mysql2's [rows, fields].
      const result = await trx.raw(sql, values ?? []);
      return Array.isArray(result) ? [result[0], result[1]] : [result, undefined];
    },
    trx.isTransaction === true ? undefined : `is a Knex instance, not a transaction: ${HOW}. Use await knex.transaction(async (trx) => { ...; await outbox.enqueue(mysqlFromKnex(trx), event); })`,
  );
}

/**
 * A Drizzle transaction on MySQL (`drizzle-orm/mysql2`): the `tx` of
 * `await db.transaction(async (tx) => ...)`. Pass Drizzle's `sql` tag too
 * (txbox does not import Drizzle). The type takes Drizzle's mysql2 databases
 * only: their `execute` resolves with mysql2's `[rows, fields]` (a Drizzle
 * PostgreSQL transaction resolves with an object and does not compile; use
 * `fromDrizzle` of `txbox` there). txbox's statements use `?` placeholders
 * only, never inside a literal.
 * @example
 * import { sql } from 'drizzle-orm';
 * await db.transaction(async (tx) => { ...; await outbox.enqueue(mysqlFromDrizzle(tx, sql), event); });
 */
export function mysqlFromDrizzle(
  tx: { execute(query: never): Promise<readonly [unknown, unknown]>; readonly rollback?: unknown },
  sqlTag: { raw(text: string): unknown; join(chunks: unknown[]): unknown } & ((strings: TemplateStringsArray, ...values: unknown[]) => unknown),
): MysqlExecutor {
  return adapted(
    async (sql, values = []) => {
      const parts = sql.split('?');
      if (parts.length - 1 !== values.length) throw new Error(`txbox: the statement has ${parts.length - 1} placeholders for ${values.length} values`);
      const chunks: unknown[] = [];
      parts.forEach((part, i) => {
        chunks.push(sqlTag.raw(part));
        if (i < values.length) chunks.push(sqlTag`${values[i]}`);
      });
      const [rows, fields] = await tx.execute(sqlTag.join(chunks) as never);
      return [rows, fields];
    },
    // Drizzle's transactions have rollback(); its databases do not.
    typeof tx.rollback === 'function'
      ? undefined
      : `is a Drizzle database, not a transaction: ${HOW}. Use await db.transaction(async (tx) => { ...; await outbox.enqueue(mysqlFromDrizzle(tx, sql), event); })`,
  );
}
