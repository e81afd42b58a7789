import { ConfigError } from '../../core/errors.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { inboxNames } from './postgres-inbox-store.ts';
import type { PostgresNames } from './postgres-sql.ts';
import type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../../core/inbox-admin-types.ts';

export type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../../core/inbox-admin-types.ts';

const num = (v: unknown): number => Number(v ?? 0);

/** Operations on an inbox table: status, dead events, retention. Used by `txbox inbox`. */
export class PostgresInboxAdmin {
  readonly names: PostgresNames;

  constructor(
    private readonly db: PostgresConnection,
    options: { schema?: string; table?: string } = {},
  ) {
    this.names = inboxNames(options);
  }

  async status(): Promise<InboxConsumerStatus[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT consumer,
        count(*) FILTER (WHERE status = 'processed') AS processed,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'dead') AS dead,
        count(*) FILTER (WHERE status = 'held') AS held,
        count(*) FILTER (WHERE status = 'retry') AS retry,
        count(*) FILTER (WHERE processed_at > now() - interval '1 minute') AS recent,
        max(processed_at) AS last
      FROM ${this.names.outbox} GROUP BY consumer ORDER BY consumer`);
    return rows.map((r) => ({
      consumer: String(r.consumer),
      processed: num(r.processed),
      failed: num(r.failed),
      dead: num(r.dead),
      held: num(r.held),
      retry: num(r.retry),
      processedLastMinute: num(r.recent),
      lastProcessedAt: (r.last as Date | null) ?? null,
    }));
  }

  async listDead(options: { consumer?: string; limit?: number } = {}): Promise<DeadEvent[]> {
    return (await this.#list('dead', options)).map(({ version: _v, heldAt: _h, ...dead }) => dead);
  }

  /**
   * Held events (waiting for an earlier version of their key), oldest first:
   * `lastError` is the hold reason (`version 24 ... waits for version 23`),
   * `version` the event's version, `heldAt` when it was last held or re-checked.
   */
  listHeld(options: { consumer?: string; limit?: number } = {}): Promise<HeldEvent[]> {
    return this.#list('held', options);
  }

  async #list(status: 'dead' | 'held', options: { consumer?: string; limit?: number }): Promise<HeldEvent[]> {
    const limit = options.limit ?? 100;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new ConfigError('limit', 'must be a positive integer, e.g. 100');
    const { rows } = await this.db.query<Record<string, unknown>>(
      `SELECT consumer, event_id, type, key, version, attempts, last_error, received_at, held_at FROM ${this.names.outbox}
       WHERE status = $3 AND ($1::text IS NULL OR consumer = $1) ORDER BY received_at LIMIT $2`,
      [options.consumer ?? null, limit, status],
    );
    return rows.map((r) => ({
      consumer: String(r.consumer),
      id: String(r.event_id),
      type: String(r.type),
      key: String(r.key),
      attempts: num(r.attempts),
      lastError: (r.last_error as string | null) ?? null,
      receivedAt: r.received_at as Date,
      version: r.version === null || r.version === undefined ? null : Number(r.version),
      heldAt: (r.held_at as Date | null) ?? null,
    }));
  }

  /** Marks dead events for another run; the consumer's inbox picks them up (`inbox.start()` or `redrive()`). */
  retryDead(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]> {
    return this.#act('retry', 'dead', `UPDATE ${this.names.outbox} i SET status = 'retry', attempts = 0`, selector, actor);
  }

  /**
   * Marks held events to run again now; the consumer's inbox picks them up
   * like operator retries (`inbox.start()` or `redrive()`): one whose missing
   * version was applied is applied, one whose gap is still open is held again.
   */
  retryHeld(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]> {
    return this.#act('retry-held', 'held', `UPDATE ${this.names.outbox} i SET status = 'retry'`, selector, actor);
  }

  /** Deletes dead events (their ids stay in the audit table); a later redelivery would run the handler again. */
  discardDead(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]> {
    return this.#act('discard', 'dead', `DELETE FROM ${this.names.outbox} i`, selector, actor);
  }

  async #act(action: string, status: 'dead' | 'held', head: string, selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]> {
    const ids = 'ids' in selector ? [...selector.ids] : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const consumer = 'all' in selector ? (selector.consumer ?? null) : null;
    const { rows } = await this.db.query<{ event_id: string }>(
      `WITH changed AS (
         ${head} WHERE i.status = $5 AND ($1::uuid[] IS NULL OR i.event_id = ANY($1::uuid[])) AND ($2::text IS NULL OR i.consumer = $2)
         RETURNING i.consumer, i.event_id, i.last_error
       ), audit AS (
         INSERT INTO ${this.names.audit} (action, consumer, event_id, actor, detail) SELECT $3, consumer, event_id, $4, last_error FROM changed
       )
       SELECT event_id FROM changed`,
      [ids, consumer, action, actor, status],
    );
    return rows.map((r) => r.event_id);
  }

  /**
   * Deletes processed rows older than `olderThanMs` in batches. A redelivery
   * older than that would run its handler again: keep rows longer than any
   * broker may redeliver (default in the CLI: 7 days).
   */
  async prune(olderThanMs: number, batchSize = 5000, onProgress?: (deleted: number) => void): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive whole number, e.g. 5000');
    let total = 0;
    for (;;) {
      const { rows } = await this.db.query<{ n: number }>(
        `WITH doomed AS (
           SELECT consumer, event_id FROM ${this.names.outbox}
           WHERE status = 'processed' AND processed_at < now() - $1 * interval '1 millisecond' LIMIT $2 FOR UPDATE SKIP LOCKED
         ), gone AS (
           DELETE FROM ${this.names.outbox} i USING doomed d WHERE i.consumer = d.consumer AND i.event_id = d.event_id RETURNING 1
         ) SELECT count(*)::int AS n FROM gone`,
        [olderThanMs, batchSize],
      );
      total += rows[0]!.n;
      if (rows[0]!.n > 0) onProgress?.(total);
      if (rows[0]!.n < batchSize) return total;
    }
  }
}
