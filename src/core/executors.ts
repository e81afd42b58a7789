/**
 * Adapters from popular clients and query builders to the executor seam
 * (`SqlExecutor`). txbox imports none of them: each adapter is typed by the
 * shape it needs. Pass the adapter the transaction object, never the pool,
 * so that events commit with the business rows.
 */
import type { SqlExecutor } from './ports.ts';

/**
 * Set by the adapters on the executor they return when the library told them
 * the object is not a transaction (a Kysely or Knex instance, a Drizzle
 * database): the reason, for `enqueue` to refuse it.
 */
const NOT_A_TRANSACTION = Symbol.for('txbox.notATransaction');

function marked(executor: SqlExecutor, reason: string | undefined): SqlExecutor {
  if (reason !== undefined) Object.defineProperty(executor, NOT_A_TRANSACTION, { value: reason });
  return executor;
}

const HOW = 'the events would be written in autocommit and commit even if your business transaction rolls back';

/**
 * Why `tx` is certainly not an open transaction, or undefined when it is one
 * or when the driver does not say. Reads only what drivers expose, without a
 * round trip: pg's `getTransactionStatus()` (the ReadyForQuery status: 'I'
 * idle, 'T' in a transaction, 'E' in a failed one), a pg Pool's shape
 * (`totalCount` and `connect` without `release`), PGlite's
 * `isInTransaction()`, the adapters' marks, and a `transaction()` method
 * (an object that begins transactions, such as txbox's PostgresConnection).
 */
export function notInTransaction(tx: object): string | undefined {
  const t = tx as Record<string | symbol, unknown>;
  const mark = t[NOT_A_TRANSACTION];
  if (typeof mark === 'string') return mark;
  if (typeof t.getTransactionStatus === 'function') {
    const status: unknown = (t.getTransactionStatus as () => unknown).call(tx);
    if (status === 'I') {
      return `is a pg client outside a transaction (no BEGIN yet, or already committed or rolled back): ${HOW}. Run await client.query('BEGIN') first (await it), enqueue, then COMMIT`;
    }
    return undefined;
  }
  if (typeof t.totalCount === 'number' && typeof t.connect === 'function' && typeof t.release !== 'function') {
    return `is a pg Pool, not a transaction: each query may run on another connection in autocommit, so ${HOW}. Check out a client (const client = await pool.connect()), run BEGIN on it, pass the client to enqueue, then COMMIT and release it`;
  }
  if (typeof t.isInTransaction === 'function' && typeof t.transaction === 'function') {
    if ((t.isInTransaction as () => unknown).call(tx) === true) return undefined;
    return `is a PGlite database, not a transaction: ${HOW}. Pass the transaction: await db.transaction(async (tx) => { ...; await outbox.enqueue(tx, event); })`;
  }
  if (typeof t.transaction === 'function') {
    // txbox's own PostgresConnection, or a database object passed without its adapter: it begins transactions, so it is not one.
    return `has a transaction() method, so it begins transactions rather than being one: ${HOW}. Pass the transaction it gives you: await connection.transaction(async (tx) => { ...; await outbox.enqueue(tx, event); })`;
  }
  return undefined;
}

type Rows = { rows: unknown[] };

/** `pg` Client or PoolClient inside BEGIN ... COMMIT: it already fits; this only documents intent. */
export function fromPg(client: { query(text: string, params?: unknown[]): Promise<Rows> }): SqlExecutor {
  return client;
}

/** PGlite's transaction object (from `db.transaction(async (tx) => ...)`): it already fits. */
export function fromPglite(tx: { query(text: string, params?: unknown[]): Promise<Rows> }): SqlExecutor {
  return tx;
}

/**
 * A Kysely transaction. Pass Kysely's `CompiledQuery` too (txbox does not import Kysely).
 * @example
 * import { CompiledQuery } from 'kysely';
 * await db.transaction().execute(async (trx) => { ...; await outbox.enqueue(fromKysely(trx, CompiledQuery), event); });
 */
export function fromKysely(
  trx: { executeQuery(query: never): Promise<{ rows: unknown[] }>; readonly isTransaction?: boolean },
  compiledQuery: { raw(sql: string, parameters?: unknown[]): unknown },
): SqlExecutor {
  return marked(
    { query: async (text, params) => trx.executeQuery(compiledQuery.raw(text, params ?? []) as never) },
    trx.isTransaction === false
      ? `is a Kysely instance, not a transaction: ${HOW}. Use await db.transaction().execute(async (trx) => { ...; await outbox.enqueue(fromKysely(trx, CompiledQuery), event); })`
      : undefined,
  );
}

/**
 * A Knex transaction on PostgreSQL (`await knex.transaction(async (trx) => ...)`).
 * Knex binds `?` placeholders, so `$n` ones are rewritten in order.
 */
export function fromKnex(trx: { raw(sql: string, bindings: unknown[]): PromiseLike<{ rows?: unknown[] }>; readonly isTransaction?: boolean }): SqlExecutor {
  return marked(
    {
      async query(text, params = []) {
        const { sql, bindings } = positionalToQuestionMarks(text, params);
        const result = await trx.raw(sql, bindings);
        return { rows: result.rows ?? [] };
      },
    },
    trx.isTransaction === true
      ? undefined
      : `is a Knex instance, not a transaction: ${HOW}. Use await knex.transaction(async (trx) => { ...; await outbox.enqueue(fromKnex(trx), event); })`,
  );
}

/**
 * A Drizzle transaction (node-postgres or PGlite driver). Pass Drizzle's `sql` tag too.
 * @example
 * import { sql } from 'drizzle-orm';
 * await db.transaction(async (tx) => { ...; await outbox.enqueue(fromDrizzle(tx, sql), event); });
 */
export function fromDrizzle(
  tx: { execute(query: never): Promise<unknown>; rollback?: unknown },
  sqlTag: { raw(text: string): unknown; join(chunks: unknown[]): unknown } & ((strings: TemplateStringsArray, ...values: unknown[]) => unknown),
): SqlExecutor {
  return marked({
    async query(text, params = []) {
      const chunks: unknown[] = [];
      let last = 0;
      for (const m of text.matchAll(/\$(\d+)/g)) {
        chunks.push(sqlTag.raw(text.slice(last, m.index)));
        chunks.push(sqlTag`${params[Number(m[1]) - 1]}`);
        last = m.index + m[0].length;
      }
      chunks.push(sqlTag.raw(text.slice(last)));
      const result = (await tx.execute(sqlTag.join(chunks) as never)) as { rows?: unknown[] } | unknown[];
      return { rows: Array.isArray(result) ? result : (result.rows ?? []) };
    },
  }, typeof tx.rollback === 'function'
    ? undefined
    : `is a Drizzle database, not a transaction: ${HOW}. Use await db.transaction(async (tx) => { ...; await outbox.enqueue(fromDrizzle(tx, sql), event); })`);
}

/** Rewrites `$1..$n` placeholders (in order of appearance, repeats allowed) to `?` with matching bindings. */
export function positionalToQuestionMarks(text: string, params: readonly unknown[]): { sql: string; bindings: unknown[] } {
  const bindings: unknown[] = [];
  const sql = text.replace(/\$(\d+)/g, (_m, n: string) => {
    bindings.push(params[Number(n) - 1]);
    return '?';
  });
  return { sql, bindings };
}
