import { ConfigError } from '../../core/errors.ts';
import { uuidv7 } from '../../core/uuid.ts';
import type { MysqlConnection } from './mysql-connection.ts';
import { utcDatetime } from './mysql-outbox-store.ts';
import { deleteFinishedSql, mysqlNames, NOW, type MysqlNames, type MysqlNamesOptions } from './mysql-sql.ts';

/** Per destination, as PostgresAdmin's DestinationStatus (same fields, same meaning). */
export interface MysqlDestinationStatus {
  readonly destination: string;
  readonly pending: number;
  readonly backingOff: number;
  readonly parked: number;
  /** Age of the oldest pending event in seconds, by its `occurredAt` (the table has no insert time), or null with no pending event. */
  readonly oldestPendingSeconds: number | null;
  /** Pending events of this destination that wait behind a parked event of their key. */
  readonly blockedByParked: number;
}

/** A destination one live relay has paused (circuit open), from that relay's last heartbeat: as PostgresAdmin's DestinationCircuit. */
export interface MysqlDestinationCircuit {
  readonly destination: string;
  readonly relayId: string;
  /** The error that opened it: status or network error and the endpoint, never a payload. */
  readonly reason: string;
  readonly openSince: Date;
  readonly nextProbeAt: Date;
  readonly failedProbes: number;
}

/** A relay row, as PostgresAdmin's RelayStatus. */
export interface MysqlRelayStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly state: 'alive' | 'expired' | 'left';
  readonly alive: boolean;
  readonly stateAgeSeconds: number;
  readonly leaseTtlMs: number;
  readonly buckets: number;
  readonly inFlight: number;
  readonly publishedTotal: number;
  readonly ratePerMinute: number;
  readonly heartbeatAgeSeconds: number;
}

export interface MysqlOutboxStatus {
  readonly destinations: MysqlDestinationStatus[];
  /** Relays seen in the last 24 hours: alive, expired or left. */
  readonly relays: MysqlRelayStatus[];
  /** Events in flight on alive relays (as of their last heartbeat). */
  readonly inFlight: number;
  /** Events published in the last 60 s (from retained rows, or alive relays' own counts). */
  readonly publishedLastMinute: number;
  /** From information_schema.TABLES: data and index bytes, and InnoDB's row estimate. */
  readonly table: { readonly totalBytes: number; readonly approxRows: number };
}

export interface MysqlParkedEvent {
  readonly seq: number;
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly destination: string;
  readonly attempts: number;
  readonly lastError: string | null;
  /** The MySQL table records no park time: always null (see `occurredAt`). */
  readonly parkedAt: null;
  readonly occurredAt: Date;
  /** The event's payload: only when listed with `includePayload: true`. */
  readonly payload?: unknown;
}

/** Which parked events an action applies to: some ids, or all of them (optionally of one destination). An array is ids. */
export type MysqlParkedSelector = readonly string[] | { readonly ids: readonly string[] } | { readonly all: true; readonly destination?: string };

export interface MysqlReplayFilter {
  /** By `occurredAt`, inclusive. */
  readonly from?: Date;
  /** By `occurredAt`, exclusive. */
  readonly to?: Date;
  readonly key?: string;
  readonly type?: string;
  readonly destination?: string;
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const marks = (k: number): string => Array.from({ length: k }, () => '?').join(', ');
/** Rows per audit INSERT and per UPDATE ... IN (...) of a parked action. */
const CHUNK = 1000;

/**
 * Operator actions on a MySQL or MariaDB outbox table: status, destinations
 * down (the relays' open circuits), parked events and replay, each action
 * audited. Used by the CLI and the dashboard. (Table bloat and WAL slots are
 * PostgreSQL's.)
 */
export class MysqlAdmin {
  readonly names: MysqlNames;

  constructor(
    private readonly db: MysqlConnection,
    options: MysqlNamesOptions = {},
  ) {
    this.names = mysqlNames(options);
  }

  /** One snapshot for `txbox status`. */
  async status(): Promise<MysqlOutboxStatus> {
    const [destinations, relays, recent, table] = await Promise.all([this.destinationStatus(), this.relayStatus(), this.#publishedLastMinute(), this.tableStatus()]);
    const alive = relays.filter((r) => r.alive);
    return {
      destinations,
      relays,
      inFlight: alive.reduce((s, r) => s + r.inFlight, 0),
      publishedLastMinute: Math.max(recent, alive.reduce((s, r) => s + r.ratePerMinute, 0)),
      table,
    };
  }

  /** Pending, backing off, parked, oldest pending (by occurred_at) per destination, and the pending events behind a parked one of their key. */
  async destinationStatus(): Promise<MysqlDestinationStatus[]> {
    const n = this.names;
    const [dest, blocked] = await Promise.all([
      this.db.query<Record<string, unknown>>(`SELECT destination,
          SUM(state = 'pending') AS pending,
          SUM(state = 'pending' AND next_attempt_at > ${NOW}) AS backing_off,
          SUM(state = 'parked') AS parked,
          TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN state = 'pending' THEN occurred_at END), ${NOW}) / 1000000 AS oldest
        FROM ${n.outbox} WHERE state IN ('pending', 'parked') GROUP BY destination ORDER BY destination`),
      this.db.query<{ destination: string; blocked: string }>(`SELECT o.destination, count(*) AS blocked
        FROM (SELECT \`key\`, MIN(seq) AS seq FROM ${n.outbox} WHERE state = 'parked' GROUP BY \`key\`) p
        JOIN ${n.outbox} o ON o.\`key\` = p.\`key\` AND o.seq > p.seq AND o.state = 'pending'
        GROUP BY o.destination`),
    ]);
    const blockedBy = new Map(blocked.map((r) => [r.destination, num(r.blocked)]));
    return dest.map((r) => ({
      destination: String(r.destination),
      pending: num(r.pending),
      backingOff: num(r.backing_off),
      parked: num(r.parked),
      oldestPendingSeconds: r.oldest === null ? null : Math.max(0, num(r.oldest)),
      blockedByParked: blockedBy.get(String(r.destination)) ?? 0,
    }));
  }

  /** Relays that heartbeat in the last 24 hours, judged by the server's UTC clock. */
  async relayStatus(): Promise<MysqlRelayStatus[]> {
    const n = this.names;
    const expiry = `r.heartbeat_at + INTERVAL r.ttl_ms * 1000 MICROSECOND`;
    const rows = await this.db.query<Record<string, unknown>>(`SELECT r.relay_id, r.host, r.pid, r.in_flight, r.published_total, r.rate_per_minute, r.ttl_ms AS ttl,
          CASE WHEN r.left_at IS NOT NULL THEN 'left' WHEN ${expiry} > ${NOW} THEN 'alive' ELSE 'expired' END AS state,
          TIMESTAMPDIFF(MICROSECOND, r.heartbeat_at, ${NOW}) / 1000000 AS age,
          TIMESTAMPDIFF(MICROSECOND, COALESCE(r.left_at, ${expiry}), ${NOW}) / 1000000 AS state_age,
          (SELECT count(*) FROM ${n.buckets} b WHERE b.owner = r.relay_id AND b.lease_until > ${NOW}) AS buckets
        FROM ${n.relays} r WHERE r.heartbeat_at > ${NOW} - INTERVAL 1 DAY ORDER BY r.relay_id`);
    return rows.map((r) => {
      const state = String(r.state) as MysqlRelayStatus['state'];
      const alive = state === 'alive';
      return {
        relayId: String(r.relay_id),
        host: String(r.host),
        pid: num(r.pid),
        state,
        alive,
        stateAgeSeconds: Math.max(0, alive ? num(r.age) : num(r.state_age)),
        leaseTtlMs: num(r.ttl),
        buckets: num(r.buckets),
        inFlight: num(r.in_flight),
        publishedTotal: num(r.published_total),
        ratePerMinute: num(r.rate_per_minute),
        heartbeatAgeSeconds: Math.max(0, num(r.age)),
      };
    });
  }

  /**
   * Open circuits of live relays (heartbeat in the last minute, not left), by
   * destination then relay: destinations down, whose events wait pending.
   * Each relay writes its open circuits as JSON at every heartbeat.
   */
  async circuits(): Promise<MysqlDestinationCircuit[]> {
    const rows = await this.db.query<{ relay_id: string; circuits: string | null }>(
      `SELECT relay_id, CONCAT('', circuits) AS circuits FROM ${this.names.relays}
       WHERE left_at IS NULL AND heartbeat_at > ${NOW} - INTERVAL 1 MINUTE AND circuits IS NOT NULL AND circuits <> '[]'`,
    );
    const out: MysqlDestinationCircuit[] = [];
    for (const r of rows) {
      const open = JSON.parse(r.circuits ?? '[]') as { destination?: unknown; reason?: unknown; openSince?: unknown; nextProbeAt?: unknown; failedProbes?: unknown }[];
      for (const c of Array.isArray(open) ? open : []) {
        out.push({
          destination: String(c.destination),
          relayId: String(r.relay_id),
          reason: String(c.reason ?? ''),
          openSince: new Date(String(c.openSince)),
          nextProbeAt: new Date(String(c.nextProbeAt)),
          failedProbes: num(c.failedProbes),
        });
      }
    }
    // As PostgreSQL's ORDER BY destination, relay_id (binary order, as the utf8mb4_bin columns compare).
    const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
    return out.sort((a, b) => cmp(a.destination, b.destination) || cmp(a.relayId, b.relayId));
  }

  async #publishedLastMinute(): Promise<number> {
    const [r] = await this.db.query<{ c: string }>(`SELECT count(*) AS c FROM ${this.names.outbox} WHERE state = 'published' AND done_at > ${NOW} - INTERVAL 1 MINUTE`);
    return num(r?.c);
  }

  /** Data and index bytes and InnoDB's row estimate of the outbox table (information_schema; estimates, refreshed by the server). */
  async tableStatus(): Promise<MysqlOutboxStatus['table']> {
    const [t] = await this.db.query<Record<string, unknown>>(
      `SELECT data_length + index_length AS bytes, table_rows FROM information_schema.TABLES WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`,
      [this.names.database ?? null, this.names.table],
    );
    return { totalBytes: num(t?.bytes), approxRows: num(t?.table_rows) };
  }

  /** Parked events, oldest first; their payloads only with `includePayload` (the CLI and the dashboard show none by default). */
  async listParked(options: { destination?: string; limit?: number; includePayload?: boolean } = {}): Promise<MysqlParkedEvent[]> {
    const rows = await this.db.query<Record<string, unknown>>(
      `SELECT seq, id, type, \`key\`, destination, attempts, last_error, DATE_FORMAT(occurred_at, '%Y-%m-%dT%H:%i:%s.%fZ') AS occurred_at${options.includePayload ? ", CONCAT('', payload) AS payload" : ''}
       FROM ${this.names.outbox} WHERE state = 'parked' AND (? IS NULL OR destination = ?) ORDER BY seq LIMIT ?`,
      [options.destination ?? null, options.destination ?? null, options.limit ?? 100],
    );
    return rows.map((r) => ({
      seq: num(r.seq),
      id: String(r.id),
      type: String(r.type),
      key: String(r.key),
      destination: String(r.destination),
      attempts: num(r.attempts),
      lastError: (r.last_error as string | null) ?? null,
      parkedAt: null,
      occurredAt: new Date(String(r.occurred_at)),
      ...(options.includePayload ? { payload: JSON.parse(String(r.payload)) as unknown } : {}),
    }));
  }

  /**
   * Events published in the last `seconds` per destination, from retained
   * rows (the `finished` index). The dashboard samples it for its
   * publish-rate chart.
   */
  async publishedPerDestination(seconds = 60): Promise<{ destination: string; published: number }[]> {
    const rows = await this.db.query<{ destination: string; c: string }>(
      `SELECT destination, count(*) AS c FROM ${this.names.outbox}
       WHERE state = 'published' AND done_at > ${NOW} - INTERVAL ? MICROSECOND GROUP BY destination ORDER BY destination`,
      [Math.round(seconds * 1_000_000)],
    );
    return rows.map((r) => ({ destination: String(r.destination), published: num(r.c) }));
  }

  /** Makes parked events pending again with a fresh attempt count. Returns the ids changed, in outbox order. */
  retryParked(selector: MysqlParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('retry', `UPDATE ${this.names.outbox} SET state = 'pending', attempts = 0, next_attempt_at = NULL`, selector, actor);
  }

  /** Marks parked events as skipped: they will not be published and no longer hold their key. */
  skipParked(selector: MysqlParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('skip', `UPDATE ${this.names.outbox} SET state = 'skipped', done_at = ${NOW}`, selector, actor);
  }

  /** Deletes parked events. The audit table keeps their ids. */
  discardParked(selector: MysqlParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('discard', `DELETE FROM ${this.names.outbox}`, selector, actor);
  }

  async #parked(action: string, head: string, selector: MysqlParkedSelector, actor: string): Promise<string[]> {
    const ids = Array.isArray(selector) ? (selector as readonly string[]) : 'ids' in (selector as object) ? (selector as { ids: readonly string[] }).ids : null;
    const destination = ids === null ? ((selector as { destination?: string }).destination ?? null) : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const n = this.names;
    return this.db.transaction(async (tx) => {
      const [rows] = (await tx.query(
        `SELECT seq, id, last_error FROM ${n.outbox} WHERE state = 'parked'${ids === null ? '' : ` AND id IN (${marks(ids.length)})`} AND (? IS NULL OR destination = ?) ORDER BY seq FOR UPDATE`,
        [...(ids ?? []).map((id) => id.toLowerCase()), destination, destination],
      )) as unknown as [{ seq: string; id: string; last_error: string | null }[]];
      for (let i = 0; i < rows.length; i += CHUNK) {
        const part = rows.slice(i, i + CHUNK);
        await tx.query(`${head} WHERE state = 'parked' AND seq IN (${marks(part.length)})`, part.map((r) => r.seq));
        await tx.query(
          `INSERT INTO ${n.audit} (at, action, event_id, seq, actor, detail) VALUES ${part.map(() => `(${NOW}, ?, ?, ?, ?, ?)`).join(', ')}`,
          part.flatMap((r) => [action, r.id, r.seq, actor, r.last_error]),
        );
      }
      return rows.map((r) => r.id);
    });
  }

  /**
   * Re-publishes published events matching `filter` as new deliveries with
   * their original ids, appended in their original order after whatever is
   * pending, `chunk` rows per statement; `onProgress` is called after each.
   * Audited before the first copy (`replay-start`) and after the last
   * (`replay`, with the count), as on PostgreSQL.
   */
  async replay(filter: MysqlReplayFilter, actor: string, onProgress?: (copied: number) => void, chunk = 5000): Promise<{ replayId: string; copied: number }> {
    const n = this.names;
    const replayId = uuidv7();
    await this.db.query(`INSERT INTO ${n.audit} (at, action, actor, detail) VALUES (${NOW}, 'replay-start', ?, ?)`, [actor, JSON.stringify({ replayId, ...filter })]);
    const where = `state = 'published' AND replay_id IS NULL AND seq > ?
      AND (? IS NULL OR occurred_at >= ?) AND (? IS NULL OR occurred_at < ?)
      AND (? IS NULL OR \`key\` = ?) AND (? IS NULL OR type = ?) AND (? IS NULL OR destination = ?)`;
    const from = filter.from ? utcDatetime(filter.from) : null;
    const to = filter.to ? utcDatetime(filter.to) : null;
    const params = (after: string) => [after, from, from, to, to, filter.key ?? null, filter.key ?? null, filter.type ?? null, filter.type ?? null, filter.destination ?? null, filter.destination ?? null];
    let after = '0';
    let copied = 0;
    for (;;) {
      // The chunk's last seq first, then copy up to it: the copies get higher seqs and are pending, so no chunk sees them.
      const [edge] = await this.db.query<{ last: string | null; c: string }>(
        `SELECT MAX(seq) AS last, count(*) AS c FROM (SELECT seq FROM ${n.outbox} WHERE ${where} ORDER BY seq LIMIT ?) s`,
        [...params(after), chunk],
      );
      if (edge?.last === null || edge?.last === undefined) break;
      const r = (await this.db.query(
        `INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at, version, replay_id)
         SELECT id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, JSON_SET(headers, '$."txbox-replay-id"', ?), occurred_at, version, ?
         FROM ${n.outbox} WHERE ${where} AND seq <= ? ORDER BY seq`,
        [replayId, replayId, ...params(after), edge.last],
      )) as unknown as { affectedRows: number };
      copied += Number(r.affectedRows);
      if (r.affectedRows > 0) onProgress?.(copied);
      if (num(edge.c) < chunk) break;
      after = String(edge.last);
    }
    await this.db.query(`INSERT INTO ${n.audit} (at, action, actor, detail) VALUES (${NOW}, 'replay', ?, ?)`, [actor, JSON.stringify({ replayId, copied, ...filter })]);
    return { replayId, copied };
  }

  /**
   * Deletes published and skipped rows finished more than `olderThanMs` ago,
   * at most `batchSize` per statement, each statement its own short
   * transaction; `onProgress` gets the running total after each batch.
   * Pending and parked rows are never touched.
   *
   * Each batch is two statements: the batch's seqs are read from the
   * `finished (state, done_at)` index in index order (a plain read, no
   * locks), then deleted by primary key with the condition checked again.
   * The delete locks only those rows (a relay marking other rows published
   * never waits on it), is deterministic for statement-based replication (a
   * `DELETE ... LIMIT` is not), and a row another prune (a relay's
   * retention) deleted meanwhile is simply not counted.
   */
  async prune(olderThanMs: number, batchSize = 5000, onProgress?: (deleted: number) => void): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive whole number, e.g. 5000');
    const n = this.names;
    const done = `state IN ('published', 'skipped') AND done_at < ${NOW} - INTERVAL ? MICROSECOND`;
    const age = Math.round(olderThanMs * 1000);
    let deleted = 0;
    for (;;) {
      const batch = await this.db.query<{ seq: string }>(`SELECT seq FROM ${n.outbox} WHERE ${done} ORDER BY state, done_at LIMIT ?`, [age, batchSize]);
      if (batch.length > 0) {
        const r = (await this.db.query(deleteFinishedSql(n.outbox, batch.length, done), [...batch.map((b) => b.seq), age])) as unknown as {
          affectedRows: number;
        };
        deleted += Number(r.affectedRows);
        onProgress?.(deleted);
      }
      if (batch.length < batchSize) return deleted;
    }
  }
}
