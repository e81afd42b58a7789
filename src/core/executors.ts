/**
 * Adapters from popular clients and query builders to the executor seam
 * (`SqlExecutor`). txbox imports none of them: each adapter is typed by the
 * shape it needs. Pass the adapter the transaction object, never the pool,
 * so that events commit with the business rows.
 */
import type { SqlExecutor } from './ports.ts';

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
  trx: { executeQuery(query: never): Promise<{ rows: unknown[] }> },
  compiledQuery: { raw(sql: string, parameters?: unknown[]): unknown },
): SqlExecutor {
  return {
    query: async (text, params) => trx.executeQuery(compiledQuery.raw(text, params ?? []) as never),
  };
}

/**
 * A Knex transaction on PostgreSQL (`await knex.transaction(async (trx) => ...)`).
 * Knex binds `?` placeholders, so `$n` ones are rewritten in order.
 */
export function fromKnex(trx: { raw(sql: string, bindings: unknown[]): PromiseLike<{ rows?: unknown[] }> }): SqlExecutor {
  return {
    async query(text, params = []) {
      const { sql, bindings } = positionalToQuestionMarks(text, params);
      const result = await trx.raw(sql, bindings);
      return { rows: result.rows ?? [] };
    },
  };
}

/**
 * A Drizzle transaction (node-postgres or PGlite driver). Pass Drizzle's `sql` tag too.
 * @example
 * import { sql } from 'drizzle-orm';
 * await db.transaction(async (tx) => { ...; await outbox.enqueue(fromDrizzle(tx, sql), event); });
 */
export function fromDrizzle(
  tx: { execute(query: never): Promise<unknown> },
  sqlTag: { raw(text: string): unknown; join(chunks: unknown[]): unknown } & ((strings: TemplateStringsArray, ...values: unknown[]) => unknown),
): SqlExecutor {
  return {
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
  };
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
