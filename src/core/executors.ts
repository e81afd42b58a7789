/**
 * Adapters from popular clients and query builders to the executor seam
 * (`SqlExecutor`). txbox imports none of them: each adapter is typed by the
 * shape it needs. Pass the adapter the transaction object, never the pool,
 * so that events commit with the business rows.
 */
import { ConfigError } from './errors.ts';
import type { SqlExecutor, TransactionProblem } from './ports.ts';

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

/**
 * Why a PGlite database that says it is in a transaction cannot be written
 * through, or undefined. `db.transaction()` holds PGlite's transaction lock
 * until its callback returns, and every `db.query()` waits for that lock: an
 * enqueue on the database from inside the callback would wait forever (and
 * one from elsewhere would run after it, outside it). A manual `BEGIN` on the
 * database holds no lock. The lock is probed with a no-op that waits its
 * turn: when the lock is free it runs within microtasks, before the next
 * macrotask; when held it runs, harmlessly, once the transaction ends.
 * Resolves at once for anything but a PGlite database in a transaction.
 */
export async function pgliteTransactionLockProblem(tx: object): Promise<string | undefined> {
  const t = tx as Record<string, unknown>;
  if (typeof t.isInTransaction !== 'function' || typeof t.transaction !== 'function' || typeof t._runExclusiveTransaction !== 'function') return undefined;
  if ((t.isInTransaction as () => unknown).call(tx) !== true) return undefined;
  let free = false;
  void (t._runExclusiveTransaction as (fn: () => Promise<void>) => Promise<void>).call(tx, async () => {
    free = true;
  });
  await new Promise<void>((resolve) => setImmediate(resolve));
  if (free) return undefined;
  return (
    'is a PGlite database while a db.transaction() on it is open: a query on the database waits for that transaction to end, ' +
    'so from inside its callback the enqueue would wait forever, and from elsewhere it would run outside it. ' +
    'Pass the transaction object: await db.transaction(async (tx) => { ...; await outbox.enqueue(tx, event); })'
  );
}

/**
 * `OutboxStore.checkTransaction` for stores written through a `SqlExecutor`
 * (PostgreSQL, PGlite): not one at all (no `query` method, with a hint for a
 * postgres.js transaction passed unwrapped), or not an open transaction
 * (`notInTransaction`).
 */
export function sqlTransactionProblem(tx: unknown): TransactionProblem | undefined {
  const t = tx as { query?: unknown; unsafe?: unknown } | null | undefined;
  if (!t || typeof t.query !== 'function') {
    const hint = typeof t?.unsafe === 'function' ? ' (a postgres.js transaction: wrap it, outbox.enqueue(fromPostgresJs(sql), event))' : '';
    return { kind: 'invalid', message: `is not a transaction: pass the caller's client or transaction object (anything with query(text, params))${hint}` };
  }
  const problem = notInTransaction(t);
  return problem === undefined ? undefined : { kind: 'autocommit', message: problem };
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

/**
 * A postgres.js transaction: the `sql` that `sql.begin(async (sql) => ...)`
 * passes. Statements go through `sql.unsafe(text, params, { prepare })`.
 * `enqueue` starts its INSERT before it returns (it awaits nothing first,
 * unless a schema validates asynchronously), and postgres.js sends what is
 * queried in one turn of the event loop as one write without waiting for
 * answers: started together with the caller's other statements (returned in
 * an array from `sql.begin`, or under one `Promise.all`), the INSERT costs no
 * round trip of its own. Awaited one after the other, it costs one.
 *
 * `prepare` (default true) names the statement on the connection, as
 * postgres.js does for tagged queries. Leave it on to pipeline: postgres.js
 * sends an unprepared statement with parameters as Describe first and waits
 * for the answer (one more round trip, and later statements wait behind it).
 * Turn it off only behind a pooler that cannot keep prepared statements.
 * With the default `notify: true` the store sends two statement shapes (with
 * and without NOTIFY): each is described once per connection.
 *
 * @example
 * await sql.begin((sql) => [
 *   sql`INSERT INTO orders ${sql({ id, total })}`,
 *   outbox.enqueue(fromPostgresJs(sql), OrderCreated({ aggregateId: id, payload: { id, total } })),
 * ]);
 */
export function fromPostgresJs(
  sql: {
    unsafe(query: string, parameters?: any[], options?: { prepare?: boolean }): PromiseLike<readonly unknown[]>;
    typed(value: any, type: number): unknown;
    readonly begin?: unknown;
  },
  options: { readonly prepare?: boolean } = {},
): SqlExecutor {
  const prepare = options.prepare ?? true;
  if (typeof prepare !== 'boolean') throw new ConfigError('prepare', `(fromPostgresJs option) must be true or false, got ${String(prepare)}`);
  return marked(
    {
      query(text, params = []) {
        // txbox passes JSON as text cast in the SQL ($7::json); postgres.js would JSON.stringify a
        // parameter the server types as json a second time, so such parameters are declared text.
        const json = jsonCastParameters(text);
        const values = json.size === 0 ? params : params.map((v, i) => (typeof v === 'string' && json.has(i + 1) ? sql.typed(v, TEXT_OID) : v));
        // Calling then() is what makes postgres.js send the query: it happens here, synchronously.
        return Promise.resolve(sql.unsafe(text, values, { prepare }).then((rows) => ({ rows: rows as unknown[] })));
      },
    },
    typeof sql.begin === 'function'
      ? `is the postgres.js client (it has begin()), not a transaction: each statement may run on another connection in autocommit, so ${HOW}. Use await sql.begin(async (sql) => { ...; await outbox.enqueue(fromPostgresJs(sql), event); })`
      : undefined,
  );
}

const TEXT_OID = 25;
const jsonCasts = new Map<string, ReadonlySet<number>>();

/** The numbers n of the `$n::json` and `$n::jsonb` placeholders in `text` (cached: txbox sends few distinct texts). */
function jsonCastParameters(text: string): ReadonlySet<number> {
  let found = jsonCasts.get(text);
  if (found === undefined) {
    found = new Set([...text.matchAll(/\$(\d+)\s*::\s*jsonb?\b/gi)].map((m) => Number(m[1])));
    if (jsonCasts.size >= 1000) jsonCasts.clear();
    jsonCasts.set(text, found);
  }
  return found;
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
