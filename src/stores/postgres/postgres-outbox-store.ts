import type { OutboxStore, PreparedEvent, SqlExecutor } from '../../core/ports.ts';
import { insertEventsSql, postgresNames, type PostgresNames, type PostgresNamesOptions } from './postgres-sql.ts';

export interface PostgresOutboxStoreOptions extends PostgresNamesOptions {
  /**
   * Send one NOTIFY per inserting statement so that relays wake at once.
   * Costs producers some commit throughput (measured in docs/performance.md);
   * with `false` relays find events by polling. Default: true.
   */
  readonly notify?: boolean;
  /**
   * `ignore`: an event whose id is already in the table is skipped instead of
   * failing the statement (used by the inbox queue, where redeliveries are
   * expected). Default: `error`.
   */
  readonly onDuplicateId?: 'error' | 'ignore';
}

/**
 * The write side of a PostgreSQL (or PGlite) outbox table: one INSERT per
 * `enqueue` call, through the caller's own transaction.
 *
 * @example
 * const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: 'txbox' }), events: [OrderCreated] });
 */
export class PostgresOutboxStore implements OutboxStore {
  readonly names: PostgresNames;
  readonly #sql: string;

  constructor(options: PostgresOutboxStoreOptions = {}) {
    this.names = postgresNames(options);
    this.#sql = insertEventsSql(this.names, options.notify ?? true, options.onDuplicateId === 'ignore');
  }

  async insert(executor: SqlExecutor, events: readonly PreparedEvent[]): Promise<void> {
    if (events.length === 0) return;
    await executor.query(this.#sql, [eventsJson(events)]);
  }
}

/** One JSON array for all events; payloads are spliced in as already-serialized text. */
function eventsJson(events: readonly PreparedEvent[]): string {
  const parts: string[] = [];
  for (const e of events) {
    parts.push(
      `{"id":"${e.id}","type":${JSON.stringify(e.type)},"aggregateType":${JSON.stringify(e.aggregateType)},` +
        `"aggregateId":${JSON.stringify(e.aggregateId)},"key":${JSON.stringify(e.key)},` +
        `"destination":${JSON.stringify(e.destination)},"headers":${JSON.stringify(e.headers)},` +
        `"occurredAt":"${e.occurredAt.toISOString()}","version":${e.version === null ? 'null' : String(e.version)},` +
        `"payload":${e.payloadJson}}`,
    );
  }
  return `[${parts.join(',')}]`;
}
