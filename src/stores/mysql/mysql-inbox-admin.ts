import { ConfigError } from '../../core/errors.ts';
import { canonicalEventId } from '../../core/inbound-event.ts';
import type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../../core/inbox-admin-types.ts';
import type { MysqlConnection } from './mysql-connection.ts';
import { deadlockRetry } from './mysql-errors.ts';
import { keySlot } from './mysql-inbox-store.ts';
import { mysqlInboxNames, NOW, type MysqlInboxNames, type MysqlNamesOptions } from './mysql-sql.ts';

export type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../../core/inbox-admin-types.ts';

const num = (v: unknown): number => Number(v ?? 0);
/** DATETIME(6) text in UTC (the connection's `dateStrings`) or a Date, as a Date. */
const utc = (v: unknown): Date | null => (v === null || v === undefined ? null : v instanceof Date ? v : new Date(`${String(v).replace(' ', 'T')}Z`));
const marks = (k: number): string => Array.from({ length: k }, () => '?').join(', ');

type Selector = { ids: readonly string[] } | { all: true; consumer?: string };

/**
 * Operations on a MySQL or MariaDB inbox table: status, dead and held
 * events, operator retries (redrive), discards, retention; each retry or
 * discard is audited in `<table>_audit`. The same operations as
 * `PostgresInboxAdmin`.
 */
export class MysqlInboxAdmin {
  readonly names: MysqlInboxNames;

  constructor(
    private readonly db: MysqlConnection,
    options: MysqlNamesOptions = {},
  ) {
    this.names = mysqlInboxNames(options);
  }

  async status(): Promise<InboxConsumerStatus[]> {
    const rows = await this.db.query<Record<string, unknown>>(`SELECT consumer,
        SUM(status = 'processed') AS processed, SUM(status = 'failed') AS failed, SUM(status = 'dead') AS dead,
        SUM(status = 'held') AS held, SUM(status = 'retry') AS retry,
        SUM(processed_at > ${NOW} - INTERVAL 1 MINUTE) AS recent,
        DATE_FORMAT(MAX(processed_at), '%Y-%m-%d %H:%i:%s.%f') AS last
      FROM ${this.names.inbox} GROUP BY consumer ORDER BY consumer`);
    return rows.map((r) => ({
      consumer: String(r.consumer),
      processed: num(r.processed),
      failed: num(r.failed),
      dead: num(r.dead),
      held: num(r.held),
      retry: num(r.retry),
      processedLastMinute: num(r.recent),
      lastProcessedAt: utc(r.last),
    }));
  }

  async listDead(options: { consumer?: string; limit?: number } = {}): Promise<DeadEvent[]> {
    return (await this.#list('dead', options)).map(({ version: _v, heldAt: _h, ...dead }) => dead);
  }

  /**
   * Held events (waiting for an earlier version of their key), oldest first:
   * `lastError` is the hold reason, `version` the event's version, `heldAt`
   * when it was last held or re-checked.
   */
  listHeld(options: { consumer?: string; limit?: number } = {}): Promise<HeldEvent[]> {
    return this.#list('held', options);
  }

  async #list(status: 'dead' | 'held', options: { consumer?: string; limit?: number }): Promise<HeldEvent[]> {
    const limit = options.limit ?? 100;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new ConfigError('limit', 'must be a positive integer, e.g. 100');
    const consumer = options.consumer ?? null;
    const rows = await this.db.query<Record<string, unknown>>(
      `SELECT consumer, event_id, type, \`key\`, CAST(version AS CHAR) AS version, attempts, last_error,
         DATE_FORMAT(received_at, '%Y-%m-%d %H:%i:%s.%f') AS received, DATE_FORMAT(held_at, '%Y-%m-%d %H:%i:%s.%f') AS held
       FROM ${this.names.inbox} WHERE status = ? AND (? IS NULL OR consumer = ?) ORDER BY received_at LIMIT ?`,
      [status, consumer, consumer, limit],
    );
    return rows.map((r) => ({
      consumer: String(r.consumer),
      id: String(r.event_id),
      type: String(r.type),
      key: String(r.key),
      attempts: num(r.attempts),
      lastError: (r.last_error as string | null) ?? null,
      receivedAt: utc(r.received)!,
      version: r.version === null || r.version === undefined ? null : Number(r.version),
      heldAt: utc(r.held),
    }));
  }

  /** Marks dead events for another run; the consumer's inbox picks them up (`inbox.start()` or `redrive()`). Returns the ids changed. */
  retryDead(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('retry', 'dead', (where) => `UPDATE ${this.names.inbox} SET status = 'retry', attempts = 0 WHERE ${where}`, selector, actor);
  }

  /** Marks held events to run again now, like operator retries: one whose missing version was applied is applied, one whose gap is still open is held again. */
  retryHeld(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('retry-held', 'held', (where) => `UPDATE ${this.names.inbox} SET status = 'retry' WHERE ${where}`, selector, actor);
  }

  /** Deletes dead events (their ids stay in the audit table); a later redelivery would run the handler again. */
  discardDead(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('discard', 'dead', (where) => `DELETE FROM ${this.names.inbox} WHERE ${where}`, selector, actor);
  }

  async #act(action: string, status: 'dead' | 'held', change: (where: string) => string, selector: Selector, actor: string): Promise<string[]> {
    const ids = 'ids' in selector ? selector.ids.map((id) => canonicalEventId(id) ?? id) : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const consumer = 'all' in selector ? (selector.consumer ?? null) : null;
    const t = this.names.inbox;
    return deadlockRetry(() =>
      this.db.transaction(async (tx) => {
        const params: unknown[] = [status];
        let where = 'status = ?';
        if (ids !== null) {
          where += ` AND event_id IN (${marks(ids.length)})`;
          params.push(...ids);
        }
        if (consumer !== null) {
          where += ' AND consumer = ?';
          params.push(consumer);
        }
        const [rows] = (await tx.query(`SELECT consumer, event_id, last_error FROM ${t} WHERE ${where} ORDER BY received_at FOR UPDATE`, params)) as unknown as [
          { consumer: string; event_id: string; last_error: string | null }[],
        ];
        if (rows.length === 0) return [];
        const keys = rows.map(() => '(consumer = ? AND event_id = ?)').join(' OR ');
        await tx.query(change(`status = ? AND (${keys})`), [status, ...rows.flatMap((r) => [r.consumer, r.event_id])]);
        await tx.query(
          `INSERT INTO ${this.names.audit} (at, action, consumer, event_id, actor, detail) VALUES ${rows.map(() => `(${NOW}, ?, ?, ?, ?, ?)`).join(', ')}`,
          rows.flatMap((r) => [action, r.consumer, r.event_id, actor, r.last_error]),
        );
        return rows.map((r) => r.event_id);
      }),
    );
  }

  /**
   * Deletes processed rows older than `olderThanMs`, at most `batchSize` per
   * statement, each statement its own short transaction; `onProgress` gets
   * the running total after each batch. A redelivery older than that would
   * run its handler again: keep rows longer than any broker may redeliver.
   *
   * As `MysqlAdmin.prune`: each batch's rows are read from the
   * `finished (status, processed_at)` index without locks, then deleted by
   * primary key with the condition checked again, so the delete locks those
   * rows only and is deterministic for statement-based replication.
   */
  async prune(olderThanMs: number, batchSize = 5000, onProgress?: (deleted: number) => void): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive whole number, e.g. 5000');
    const t = this.names.inbox;
    const done = `status = 'processed' AND processed_at < ${NOW} - INTERVAL ? MICROSECOND`;
    const age = Math.round(olderThanMs * 1000);
    let total = 0;
    for (;;) {
      const batch = await this.db.query<{ consumer: string; event_id: string }>(`SELECT consumer, event_id FROM ${t} WHERE ${done} ORDER BY processed_at LIMIT ?`, [age, batchSize]);
      if (batch.length > 0) {
        // One statement per consumer: `consumer = ? AND event_id IN (...)` is a range on the primary key, where an
        // OR of 5,000 (consumer, event_id) pairs makes MariaDB scan the whole table.
        const byConsumer = new Map<string, string[]>();
        for (const b of batch) {
          const ids = byConsumer.get(b.consumer);
          if (ids) ids.push(b.event_id);
          else byConsumer.set(b.consumer, [b.event_id]);
        }
        for (const [consumer, ids] of byConsumer) {
          // FORCE INDEX (PRIMARY): on a small table the server would rather scan, locking every row it passes and
          // waiting for an inbox transaction's uncommitted row; a hint needs the multi-table form.
          const r = (await this.db.query(`DELETE i FROM ${t} i FORCE INDEX (PRIMARY) WHERE i.consumer = ? AND i.event_id IN (${marks(ids.length)}) AND ${done}`, [consumer, ...ids, age])) as unknown as {
            affectedRows: number;
          };
          total += Number(r.affectedRows);
        }
        onProgress?.(total);
      }
      if (batch.length < batchSize) return total;
    }
  }

  /**
   * Deletes the per-key lock rows (`<table>_keys`) of keys that have no open
   * versioned event (failed, retry, held or dead) left, at most `batchSize`
   * per statement; returns how many. Without this the table keeps one row
   * per versioned key ever seen.
   *
   * Why this is safe while consumers run: a lock row holds no state; it only
   * exists to be locked. `MysqlInboxStore.runBatch` takes it with
   * `INSERT ... ON DUPLICATE KEY UPDATE` (never `SELECT ... FOR UPDATE`, which
   * would lock nothing once the row is gone), at the start of the transaction,
   * and holds it until commit. So:
   * - a row some inbox transaction holds cannot be deleted under it: the
   *   DELETE waits for that transaction to end;
   * - a row deleted while no one holds it puts its slot back where it was
   *   before the key's first event: the next transaction of the key inserts it
   *   again, and two such transactions serialize on the primary key (the
   *   second inserter waits for the first one's row lock) exactly as the first
   *   two events of a new key always have. A deadlock InnoDB reports there is
   *   rolled back and run again by the store, like every other;
   * - a DELETE that an inbox transaction waits for (it arrived after the
   *   DELETE took the row) lets that transaction insert the row afresh once
   *   the DELETE commits, and then hold it as before.
   * Either way no two transactions of one key hold the lock at once, which
   * is all the hold/release protocol relies on. The open-event filter is not
   * needed for safety: it keeps the rows of keys that will run again (held,
   * failed, retried) instead of deleting and re-creating them. It is read
   * once, before the batches; a key that gets an open event after that is
   * covered by the argument above.
   *
   * The deletes run at READ COMMITTED (the next transaction only), so they
   * take no gap locks that would stall the inserts of new keys.
   */
  async pruneKeys(batchSize = 5000, onProgress?: (deleted: number) => void): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive whole number, e.g. 5000');
    const { inbox, keys } = this.names;
    const open = new Set(
      (
        await this.db.query<{ consumer: string; key: string }>(
          `SELECT DISTINCT consumer, \`key\` FROM ${inbox} WHERE status IN ('failed', 'retry', 'held', 'dead') AND version IS NOT NULL`,
        )
      ).map((r) => keySlot(r.consumer, r.key)),
    );
    let after = -1;
    let total = 0;
    for (;;) {
      const batch = (await this.db.query<{ slot: string | number }>(`SELECT slot FROM ${keys} WHERE slot > ? ORDER BY slot LIMIT ?`, [after, batchSize])).map((r) => Number(r.slot));
      const doomed = batch.filter((slot) => !open.has(slot));
      if (doomed.length > 0) {
        const r = await deadlockRetry(() =>
          this.db.withConnection(async (conn) => {
            await conn.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
            const [header] = (await conn.query(`DELETE FROM ${keys} WHERE slot IN (${marks(doomed.length)})`, doomed)) as unknown as [{ affectedRows: number }];
            return Number(header.affectedRows);
          }),
        );
        total += r;
        onProgress?.(total);
      }
      if (batch.length < batchSize) return total;
      after = batch[batch.length - 1]!;
    }
  }
}
