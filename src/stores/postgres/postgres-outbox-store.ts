import { ConfigError, NotInTransactionError } from '../../core/errors.ts';
import { pgliteTransactionLockProblem, sqlTransactionProblem } from '../../core/executors.ts';
import type { OutboxStore, PreparedEvent, SqlExecutor, TransactionProblem } from '../../core/ports.ts';
import { queryPrepared, statementName } from './prepared.ts';
import { insertEventsSql, postgresNames, type PostgresNames, type PostgresNamesOptions } from './postgres-sql.ts';

export interface PostgresOutboxStoreOptions extends PostgresNamesOptions {
  /**
   * Send a NOTIFY with the insert so that idle relays wake at once. Costs
   * producers commit throughput: PostgreSQL runs notifying commits one at a
   * time (measured in docs/performance.md). With `false` relays find events
   * by polling. Default: true.
   */
  readonly notify?: boolean;
  /**
   * With `notify`, at most one enqueue per this many ms (per store instance)
   * carries the NOTIFY; the others insert without it. A relay that was woken
   * polls again within milliseconds after each batch (`minPollIntervalMs`),
   * so events in between are found as fast, while busy producers no longer
   * queue on the notify lock at every commit. If the one notifying
   * transaction rolls back, the others in its interval wait for the relay's
   * poll. 0 notifies with every enqueue. Default: 10.
   */
  readonly notifyIntervalMs?: number;
  /**
   * `ignore`: an event whose id is already in the table is skipped instead of
   * failing the statement (used by the inbox queue, where redeliveries are
   * expected). Default: `error`.
   */
  readonly onDuplicateId?: 'error' | 'ignore';
  /**
   * When the executor is a node-postgres `Client` or `PoolClient`, send the
   * insert as a named prepared statement, parsed and planned once per
   * connection instead of on every enqueue (measured in docs/performance.md).
   * Turn it off behind a pooler that cannot keep prepared statements (PgBouncer
   * before 1.21, or without `max_prepared_statements`, in transaction mode).
   * Default: true.
   */
  readonly prepare?: boolean;
}

interface Statement {
  readonly name: string;
  readonly text: string;
}

/**
 * The write side of a PostgreSQL (or PGlite) outbox table: one INSERT per
 * `enqueue` call, through the caller's own transaction.
 *
 * @example
 * const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'txbox' }), events: [OrderCreated] });
 */
export class PostgresOutboxStore implements OutboxStore<SqlExecutor> {
  readonly names: PostgresNames;
  /** [one event, many events], each without and with the NOTIFY. */
  readonly #plain: readonly [Statement, Statement];
  readonly #notifying: readonly [Statement, Statement] | undefined;
  readonly #notifyIntervalMs: number;
  readonly #prepare: boolean;
  #lastNotify = Number.NEGATIVE_INFINITY;

  constructor(options: PostgresOutboxStoreOptions = {}) {
    this.names = postgresNames(options);
    const ignore = options.onDuplicateId === 'ignore';
    const shapes = (notify: boolean) =>
      [statement(insertEventsSql(this.names, notify, ignore, true)), statement(insertEventsSql(this.names, notify, ignore, false))] as const;
    this.#plain = shapes(false);
    this.#notifying = (options.notify ?? true) ? shapes(true) : undefined;
    const interval = options.notifyIntervalMs ?? 10;
    if (!Number.isFinite(interval) || interval < 0) throw new ConfigError('notifyIntervalMs', `must be a number of milliseconds >= 0, got ${String(interval)}`);
    this.#notifyIntervalMs = interval;
    this.#prepare = options.prepare ?? true;
  }

  /** A `SqlExecutor` inside an open transaction (see `sqlTransactionProblem`). */
  checkTransaction(tx: unknown): TransactionProblem | undefined {
    return sqlTransactionProblem(tx);
  }

  async insert(executor: SqlExecutor, events: readonly PreparedEvent[]): Promise<void> {
    if (events.length === 0) return;
    if (typeof (executor as { isInTransaction?: unknown }).isInTransaction === 'function') {
      // Only a PGlite database passed as it is; transactions and pg clients skip this without an await.
      const problem = await pgliteTransactionLockProblem(executor);
      if (problem !== undefined) throw new NotInTransactionError(problem);
    }
    let shapes = this.#plain;
    if (this.#notifying) {
      const now = performance.now();
      if (now - this.#lastNotify >= this.#notifyIntervalMs) {
        this.#lastNotify = now;
        shapes = this.#notifying;
      }
    }
    const [stmt, params] = events.length === 1 ? [shapes[0], eventParams(events[0]!)] : [shapes[1], [eventsJson(events)]];
    await queryPrepared(executor, stmt.text, params, this.#prepare, stmt.name);
  }
}

/** A statement with a name derived from its text, so that two stores with different tables never share a prepared name. */
function statement(text: string): Statement {
  return { name: statementName(text), text };
}

function eventParams(e: PreparedEvent): unknown[] {
  return [e.id, e.type, e.aggregateType, e.aggregateId, e.key, e.destination, e.payloadJson, JSON.stringify(e.headers), e.occurredAt.toISOString(), e.version === null ? null : String(e.version)];
}

/** One JSON array for all events, keyed by column name; payloads are spliced in as already-serialized text. */
function eventsJson(events: readonly PreparedEvent[]): string {
  const parts: string[] = [];
  for (const e of events) {
    parts.push(
      `{"id":"${e.id}","type":${JSON.stringify(e.type)},"aggregate_type":${JSON.stringify(e.aggregateType)},` +
        `"aggregate_id":${JSON.stringify(e.aggregateId)},"key":${JSON.stringify(e.key)},` +
        `"destination":${JSON.stringify(e.destination)},"headers":${JSON.stringify(e.headers)},` +
        `"occurred_at":"${e.occurredAt.toISOString()}","version":${e.version === null ? 'null' : String(e.version)},` +
        `"payload":${e.payloadJson}}`,
    );
  }
  return `[${parts.join(',')}]`;
}
