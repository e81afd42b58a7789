import { storedEvent, type StoredEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import { millisOption } from '../../core/duration.ts';
import type { BucketLease, ClaimOptions, Completion, OutboxGauges, RelayHeartbeat, RelayStore } from '../../core/ports.ts';
import { boundedMysqlConnection, type MysqlConnection } from './mysql-connection.ts';
import { deadlockRetry } from './mysql-errors.ts';
import { claimSql, deleteFinishedSql, mysqlNames, NOW, type MysqlNames, type MysqlNamesOptions } from './mysql-sql.ts';

export interface MysqlRelayStoreOptions extends MysqlNamesOptions {
  /** The relay's own database handle (`mysqlConnection(...)`). Required. */
  readonly connection: MysqlConnection;
  /**
   * Delete rows when they are published instead of keeping them for
   * `txbox replay` until retention removes them (the same fenced completion
   * deletes the row rather than marking it). Default: false.
   */
  readonly deleteOnPublish?: boolean;
  /**
   * The longest the relay waits for one of its statements or transactions
   * (claims, marks, lease renewals, retention); past it the call fails as an
   * outage (retried) and its connection is destroyed, so that a database gone
   * silent holds nothing up. Lease renewals wait at most the lease TTL. Default: 30000 ms.
   */
  readonly statementTimeoutMs?: number;
}

const BUCKETS = 256;

interface EventRow {
  seq: string | number;
  id: string;
  type: string;
  aggregate_type: string;
  aggregate_id: string;
  key: string;
  bucket: number;
  destination: string;
  payload: string;
  headers: string;
  occurred_at: string;
  version: string | number | null;
  attempts: number;
  routes_done: string | null;
}

function rowToEvent(r: EventRow): StoredEvent {
  return storedEvent({
    seq: Number(r.seq),
    id: r.id,
    type: r.type,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    key: r.key,
    bucket: Number(r.bucket),
    destination: r.destination,
    payloadJson: r.payload,
    headers: JSON.parse(r.headers) as Record<string, string>,
    occurredAt: new Date(r.occurred_at),
    version: r.version === null ? null : Number(r.version),
    attempts: Number(r.attempts),
    routesDone: r.routes_done === null ? [] : (JSON.parse(r.routes_done) as string[]),
  });
}

const marks = (k: number): string => Array.from({ length: k }, () => '?').join(', ');

/**
 * The relay side of a MySQL or MariaDB outbox table. Leases and fencing as
 * on PostgreSQL: each bucket row carries its owner, a lease end by the
 * server's UTC clock and a token bumped on every acquisition; a completion
 * applies only while the relay holds the row's bucket under the same token
 * with the lease unexpired, with those bucket rows share-locked so no
 * takeover commits in between. Wake-up is polling only.
 *
 * @example
 * const store = new MysqlRelayStore({ connection: await mysqlConnection({ uri }) });
 */
export class MysqlRelayStore implements RelayStore {
  readonly names: MysqlNames;
  readonly #db: MysqlConnection;
  readonly #timeoutMs: number;
  readonly #deleteOnPublish: boolean;

  constructor(options: MysqlRelayStoreOptions) {
    if (!options?.connection || typeof options.connection.query !== 'function') throw new ConfigError('connection', 'is required: pass mysqlConnection({ uri }) or mysqlConnection({ pool })');
    if (options.deleteOnPublish !== undefined && typeof options.deleteOnPublish !== 'boolean') {
      throw new ConfigError('deleteOnPublish', `must be true or false, got ${JSON.stringify(options.deleteOnPublish)}`);
    }
    this.names = mysqlNames(options);
    const timeoutMs = (this.#timeoutMs = millisOption('statementTimeoutMs', options.statementTimeoutMs, 30_000, 100));
    this.#db = boundedMysqlConnection(options.connection, timeoutMs);
    this.#deleteOnPublish = options.deleteOnPublish ?? false;
  }

  /** Records the relay's liveness and its open circuits (for `txbox status` and the dashboard: `MysqlAdmin.circuits`). */
  async heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    const n = this.names;
    await this.#db.query(
      `INSERT INTO ${n.relays} (relay_id, host, pid, in_flight, published_total, rate_per_minute, ttl_ms, circuits, heartbeat_at, left_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${NOW}, NULL)
       ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), in_flight = VALUES(in_flight), published_total = VALUES(published_total),
         rate_per_minute = VALUES(rate_per_minute), ttl_ms = VALUES(ttl_ms), circuits = VALUES(circuits), heartbeat_at = ${NOW}, left_at = NULL`,
      [relay.relayId, relay.host, relay.pid, relay.inFlight, relay.publishedTotal, Math.round(relay.ratePerMinute), Math.round(ttlMs), JSON.stringify(relay.circuits ?? [])],
      Math.min(this.#timeoutMs, ttlMs),
    );
    const [row] = await this.#db.query<{ live: string | number; next_ms: string | number | null }>(
      `SELECT (SELECT count(*) FROM ${n.relays} WHERE left_at IS NULL AND heartbeat_at + INTERVAL ttl_ms * 1000 MICROSECOND > ${NOW}) AS live,
              (SELECT TIMESTAMPDIFF(MICROSECOND, ${NOW}, MIN(lease_until)) / 1000 FROM ${n.buckets} WHERE owner <> ? AND lease_until > ${NOW}) AS next_ms`,
      [relay.relayId],
      Math.min(this.#timeoutMs, ttlMs),
    );
    return { liveRelays: Math.max(1, Number(row!.live)), bucketCount: BUCKETS, nextForeignExpiryMs: row!.next_ms === null ? null : Math.ceil(Number(row!.next_ms)) };
  }

  async lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number): Promise<BucketLease[]> {
    const n = this.names;
    const ttlUs = Math.round(ttlMs * 1000);
    return deadlockRetry(() => this.#db.transaction(async (tx) => {
      // Lock every bucket row in bucket order first: lease transactions then queue instead of deadlocking
      // (the renewal's scan and another relay's acquisition took row locks in different orders: seen with three relays starting at once).
      await tx.query(`SELECT bucket FROM ${n.buckets} ORDER BY bucket FOR UPDATE`);
      if (held.length > 0) {
        await tx.query(
          `UPDATE ${n.buckets} SET lease_until = ${NOW} + INTERVAL ? MICROSECOND
           WHERE owner = ? AND (${held.map(() => '(bucket = ? AND token = ?)').join(' OR ')})`,
          [ttlUs, relayId, ...held.flatMap((l) => [l.bucket, l.token])],
        );
      }
      let acquired: readonly { bucket: number }[] = [];
      if (acquire > 0) {
        const [free] = (await tx.query(
          `SELECT bucket FROM ${n.buckets} WHERE owner IS NULL OR lease_until IS NULL OR lease_until <= ${NOW}
           ORDER BY bucket LIMIT ?`,
          [acquire],
        )) as unknown as [{ bucket: number }[]];
        if (free.length > 0) {
          await tx.query(`UPDATE ${n.buckets} SET owner = ?, token = token + 1, lease_until = ${NOW} + INTERVAL ? MICROSECOND WHERE bucket IN (${marks(free.length)})`, [
            relayId,
            ttlUs,
            ...free.map((f) => f.bucket),
          ]);
          acquired = free;
        }
      }
      const [rows] = (await tx.query(`SELECT bucket, token FROM ${n.buckets} WHERE owner = ? AND lease_until > ${NOW} ORDER BY bucket`, [relayId])) as unknown as [
        { bucket: number; token: string | number }[],
      ];
      // Only what this call renewed or acquired, as on PostgreSQL: a live bucket this relay owns but did not
      // present (released locally while the release is on its way, a restart under the same id) was not renewed,
      // and handing it back would let the relay trust it past its expiry, when another relay may take it.
      const presented = new Set(held.map((l) => `${l.bucket}:${l.token}`));
      const taken = new Set(acquired.map((f) => Number(f.bucket)));
      return rows
        .map((r) => ({ bucket: Number(r.bucket), token: String(r.token) }))
        .filter((l) => presented.has(`${l.bucket}:${l.token}`) || taken.has(l.bucket));
    }, Math.min(this.#timeoutMs, ttlMs)));
  }

  async release(relayId: string, leases: readonly BucketLease[]): Promise<void> {
    if (leases.length === 0) return;
    await this.#db.query(`UPDATE ${this.names.buckets} SET owner = NULL, lease_until = NULL WHERE owner = ? AND (${leases.map(() => '(bucket = ? AND token = ?)').join(' OR ')})`, [
      relayId,
      ...leases.flatMap((l) => [l.bucket, l.token]),
    ]);
  }

  async leave(relayId: string, held: readonly BucketLease[]): Promise<void> {
    await this.release(relayId, held); // fenced by token: a lease taken since stays its owner's
    await this.#db.query(`UPDATE ${this.names.relays} SET left_at = ${NOW}, in_flight = 0, rate_per_minute = 0 WHERE relay_id = ?`, [relayId]);
  }

  async claim(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[]> {
    if (leases.length === 0) return [];
    const skip = options.skipParkedDestinations;
    const rows = await this.#db.query<EventRow>(claimSql(this.names, leases.length, skip.length), [...leases.map((l) => l.bucket), ...skip, options.limit]);
    return rows.map(rowToEvent);
  }

  async complete(relayId: string, completions: readonly Completion[]): Promise<{ applied: number; rejected: number }> {
    if (completions.length === 0) return { applied: 0, rejected: 0 };
    const n = this.names;
    const applied = await deadlockRetry(() => this.#db.transaction(async (tx) => {
      // Share-lock the relay's live leases: a takeover (an UPDATE of these rows) waits until this commits.
      const [fence] = (await tx.query(`SELECT bucket, token FROM ${n.buckets} WHERE owner = ? AND lease_until > ${NOW} LOCK IN SHARE MODE`, [relayId])) as unknown as [
        { bucket: number; token: string | number }[],
      ];
      const live = new Set(fence.map((f) => `${f.bucket}:${f.token}`));
      const seqs = completions.map((c) => c.seq);
      // FORCE INDEX (PRIMARY) in every statement here: on a small table the server would rather scan (the whole
      // primary key, or the state index), locking every pending row it passes, other relays' and a producer's
      // uncommitted insert included, and wait for them.
      const [rows] = (await tx.query(`SELECT seq, bucket, CONCAT('', routes_done) AS routes_done FROM ${n.outbox} FORCE INDEX (PRIMARY) WHERE seq IN (${marks(seqs.length)}) AND state = 'pending' FOR UPDATE`, seqs)) as unknown as [
        { seq: string | number; bucket: number; routes_done: string | null }[],
      ];
      const bySeq = new Map(rows.map((r) => [Number(r.seq), r]));
      const passes = (c: Completion) => {
        const row = bySeq.get(c.seq);
        return row !== undefined && live.has(`${row.bucket}:${c.token}`);
      };
      let count = 0;
      const published = completions.filter((c) => c.outcome === 'published' && passes(c)).map((c) => c.seq);
      if (published.length > 0) {
        // The rows are locked (FOR UPDATE above) and passed the fence: mark them published, or delete them.
        const [r] = (await tx.query(
          this.#deleteOnPublish
            ? `DELETE o FROM ${n.outbox} o FORCE INDEX (PRIMARY) WHERE o.seq IN (${marks(published.length)}) AND o.state = 'pending'`
            : `UPDATE ${n.outbox} FORCE INDEX (PRIMARY) SET state = 'published', done_at = ${NOW}, attempts = attempts + 1, next_attempt_at = NULL WHERE seq IN (${marks(published.length)}) AND state = 'pending'`,
          published,
        )) as unknown as [{ affectedRows: number }];
        count += r.affectedRows;
      }
      for (const c of completions) {
        if (c.outcome === 'published' || !passes(c)) continue;
        const prior = bySeq.get(c.seq)!.routes_done;
        const routes = [...new Set([...(prior === null ? [] : (JSON.parse(prior) as string[])), ...(c.routesAcked ?? [])])].sort();
        const delayUs = c.outcome === 'park' ? null : Math.round(c.delayMs * 1000);
        const [r] = (await tx.query(
          `UPDATE ${n.outbox} FORCE INDEX (PRIMARY) SET state = ?, attempts = attempts + ?, last_error = ?,
             next_attempt_at = IF(? IS NULL, NULL, ${NOW} + INTERVAL ? MICROSECOND), routes_done = ?
           WHERE seq = ? AND state = 'pending'`,
          [c.outcome === 'park' ? 'parked' : 'pending', c.outcome === 'defer' ? 0 : 1, c.error, delayUs, delayUs ?? 0, routes.length ? JSON.stringify(routes) : null, c.seq],
        )) as unknown as [{ affectedRows: number }];
        count += r.affectedRows;
      }
      return count;
    }));
    return { applied, rejected: completions.length - applied };
  }

  /** Polling only: resolves after `timeoutMs` (the relay shortens it after busy batches) or when `signal` aborts. */
  waitForEvents(timeoutMs: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /**
   * A plain read of the finished rows' seqs (the `finished` index), then a
   * delete of those seqs by primary key (`deleteFinishedSql`). One `DELETE
   * ... ORDER BY seq LIMIT` is a locking scan: the server may walk the
   * primary key, locking pending rows and waiting for a producer's
   * uncommitted insert, while marks (which share-lock the lease rows) and
   * every relay's lease renewal queue behind it, up to innodb_lock_wait_timeout.
   */
  async prune(olderThanMs: number, limit: number): Promise<number> {
    const n = this.names;
    const done = `state IN ('published', 'skipped') AND done_at < ${NOW} - INTERVAL ? MICROSECOND`;
    const age = Math.round(olderThanMs * 1000);
    const batch = await this.#db.query<{ seq: string }>(`SELECT seq FROM ${n.outbox} WHERE ${done} ORDER BY state, done_at LIMIT ?`, [age, limit]);
    if (batch.length === 0) return 0;
    const r = (await this.#db.query(deleteFinishedSql(n.outbox, batch.length, done), [...batch.map((b) => b.seq), age])) as unknown as { affectedRows: number };
    return Number(r.affectedRows);
  }

  async backlog(): Promise<{ pending: number; parked: number }> {
    const [r] = await this.#db.query<{ pending: string | number; parked: string | number }>(
      `SELECT COALESCE(SUM(state = 'pending'), 0) AS pending, COALESCE(SUM(state = 'parked'), 0) AS parked FROM ${this.names.outbox}`,
    );
    return { pending: Number(r!.pending), parked: Number(r!.parked) };
  }

  /**
   * Pending, parked and the oldest pending event's age per destination, and
   * the relays alive (heartbeat within their lease TTL, by the server's UTC
   * clock): one statement, for the metrics gauges (the relay caches it and
   * reads it only when metrics are collected). The age is by `occurred_at`
   * (the writer's clock: the table has no insert time), never below 0.
   */
  async outboxGauges(): Promise<OutboxGauges> {
    const n = this.names;
    const rows = await this.#db.query<{ destination: string | null; pending: string | number | null; parked: string | number | null; oldest: string | number | null; alive: string | number }>(
      `SELECT d.destination, d.pending, d.parked, d.oldest, r.alive FROM
         (SELECT count(*) AS alive FROM ${n.relays} WHERE left_at IS NULL AND heartbeat_at + INTERVAL ttl_ms * 1000 MICROSECOND > ${NOW}) r
       LEFT JOIN (SELECT destination,
           SUM(state = 'pending') AS pending,
           SUM(state = 'parked') AS parked,
           TIMESTAMPDIFF(MICROSECOND, MIN(IF(state = 'pending', occurred_at, NULL)), ${NOW}) / 1000000 AS oldest
         FROM ${n.outbox} WHERE state IN ('pending', 'parked') GROUP BY destination) d ON 1 = 1`,
    );
    return {
      relaysAlive: Number(rows[0]?.alive ?? 0),
      destinations: rows
        .filter((r) => r.destination !== null)
        .map((r) => ({
          destination: r.destination!,
          pending: Number(r.pending ?? 0),
          parked: Number(r.parked ?? 0),
          oldestPendingSeconds: r.oldest === null ? 0 : Math.max(0, Number(r.oldest)),
        })),
    };
  }

  /** The connection is the caller's: `close()` of the connection ends it. */
  async close(): Promise<void> {}
}
