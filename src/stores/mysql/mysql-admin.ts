import { ConfigError } from '../../core/errors.ts';
import { uuidv7 } from '../../core/uuid.ts';
import type { MysqlConnection } from './mysql-connection.ts';
import { mysqlNames, NOW, type MysqlNames, type MysqlNamesOptions } from './mysql-sql.ts';

/**
 * Operator actions on a MySQL or MariaDB outbox table: parked events and
 * replay, each audited. (Status, circuits and the CLI are not there yet.)
 */
export class MysqlAdmin {
  readonly names: MysqlNames;

  constructor(
    private readonly db: MysqlConnection,
    options: MysqlNamesOptions = {},
  ) {
    this.names = mysqlNames(options);
  }

  /** Makes parked events pending again with a fresh attempt count. Returns the ids changed. */
  retryParked(ids: readonly string[], actor: string): Promise<string[]> {
    return this.#parked('retry', `state = 'pending', attempts = 0, next_attempt_at = NULL`, ids, actor);
  }

  /** Marks parked events as skipped: they will not be published and no longer hold their key. */
  skipParked(ids: readonly string[], actor: string): Promise<string[]> {
    return this.#parked('skip', `state = 'skipped', done_at = ${NOW}`, ids, actor);
  }

  async #parked(action: string, set: string, ids: readonly string[], actor: string): Promise<string[]> {
    if (ids.length === 0) throw new ConfigError('ids', 'name at least one event id');
    const n = this.names;
    const marks = ids.map(() => '?').join(', ');
    return this.db.transaction(async (tx) => {
      const [rows] = (await tx.query(`SELECT seq, id, last_error FROM ${n.outbox} WHERE state = 'parked' AND id IN (${marks}) ORDER BY seq FOR UPDATE`, [...ids])) as unknown as [
        { seq: string; id: string; last_error: string | null }[],
      ];
      if (rows.length === 0) return [];
      await tx.query(`UPDATE ${n.outbox} SET ${set} WHERE state = 'parked' AND seq IN (${rows.map(() => '?').join(', ')})`, rows.map((r) => r.seq));
      for (const r of rows) {
        await tx.query(`INSERT INTO ${n.audit} (at, action, event_id, seq, actor, detail) VALUES (${NOW}, ?, ?, ?, ?, ?)`, [action, r.id, r.seq, actor, r.last_error]);
      }
      return rows.map((r) => r.id);
    });
  }

  /**
   * Re-publishes the published events of `destination` as new deliveries
   * with their original ids, appended in their original order after
   * whatever is pending.
   */
  async replay(filter: { readonly destination: string }, actor: string): Promise<{ replayId: string; copied: number }> {
    const n = this.names;
    const replayId = uuidv7();
    const r = (await this.db.query(
      `INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at, version, replay_id)
       SELECT id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, JSON_SET(headers, '$."txbox-replay-id"', ?), occurred_at, version, ?
       FROM ${n.outbox} WHERE state = 'published' AND replay_id IS NULL AND destination = ? ORDER BY seq`,
      [replayId, replayId, filter.destination],
    )) as unknown as { affectedRows: number };
    await this.db.query(`INSERT INTO ${n.audit} (at, action, actor, detail) VALUES (${NOW}, 'replay', ?, ?)`, [actor, JSON.stringify({ replayId, copied: r.affectedRows, ...filter })]);
    return { replayId, copied: r.affectedRows };
  }
}
