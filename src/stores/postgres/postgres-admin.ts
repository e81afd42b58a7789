import { ConfigError } from '../../core/errors.ts';
import { uuidv7 } from '../../core/uuid.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { postgresNames, releaseHeldBy, type PostgresNames, type PostgresNamesOptions } from './postgres-sql.ts';

export interface DestinationStatus {
  readonly destination: string;
  readonly pending: number;
  readonly backingOff: number;
  readonly parked: number;
  /** Age of the oldest pending event in seconds, or null with no pending event. */
  readonly oldestPendingSeconds: number | null;
  /**
   * Pending events of this destination that wait behind a parked event of
   * their key (of any destination): they move once it is retried, skipped or
   * discarded. Relays started with `skipParkedDestinations` do not wait for
   * parked events of those destinations; this count does not know their list.
   */
  readonly blockedByParked: number;
}

/**
 * alive: heartbeat younger than the relay's lease TTL; expired: older (the
 * relay was killed, hangs or lost the database; its leases have expired
 * too); left: it stopped cleanly and released its leases.
 */
export type RelayState = 'alive' | 'expired' | 'left';

export interface RelayStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly state: RelayState;
  /** `state === 'alive'`. */
  readonly alive: boolean;
  /** Seconds since the state began: for alive the heartbeat's age, for expired since the TTL ran out, for left since it left. */
  readonly stateAgeSeconds: number;
  /** The lease TTL the relay heartbeats with, in ms. */
  readonly leaseTtlMs: number;
  readonly buckets: number;
  /** As of the relay's last heartbeat; only alive relays' counts are current (and summed in `OutboxStatus.inFlight`). */
  readonly inFlight: number;
  readonly publishedTotal: number;
  readonly ratePerMinute: number;
  readonly heartbeatAgeSeconds: number;
}

export interface OutboxStatus {
  readonly destinations: DestinationStatus[];
  /** Relays seen in the last 24 hours: alive, expired or left. */
  readonly relays: RelayStatus[];
  /** Events in flight on alive relays (as of their last heartbeat). */
  readonly inFlight: number;
  /** Events published in the last 60 s (from retained rows, or alive relays' own counts with delete-on-publish). */
  readonly publishedLastMinute: number;
  readonly table: { readonly totalBytes: number; readonly liveRows: number; readonly deadRows: number; readonly lastAutovacuum: Date | null };
}

/** A destination one live relay has paused (circuit open), from that relay's last heartbeat. */
export interface DestinationCircuit {
  readonly destination: string;
  readonly relayId: string;
  /** The error that opened it: status or network error and the endpoint, never a payload. */
  readonly reason: string;
  readonly openSince: Date;
  readonly nextProbeAt: Date;
  readonly failedProbes: number;
}

export interface ParkedEvent {
  readonly seq: number;
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly destination: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly parkedAt: Date;
  /** The event's payload: only when listed with `includePayload: true`. */
  readonly payload?: unknown;
}

/** Which parked events an action applies to: some ids, or all of them (optionally of one destination). */
export type ParkedSelector = { readonly ids: readonly string[] } | { readonly all: true; readonly destination?: string };

export interface ReplayFilter {
  readonly from?: Date;
  readonly to?: Date;
  readonly key?: string;
  readonly type?: string;
  readonly destination?: string;
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));

/** Operations on an outbox table: status, parked events, replay and retention. Used by the CLI. */
export class PostgresAdmin {
  readonly names: PostgresNames;

  constructor(
    private readonly db: PostgresConnection,
    options: PostgresNamesOptions = {},
  ) {
    this.names = postgresNames(options);
  }

  /** One snapshot for `txbox status`: four queries at once, each a section of the status. */
  async status(): Promise<OutboxStatus> {
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

  /**
   * Pending, backing off, parked and oldest pending per destination, and how
   * many pending events wait behind a parked one. That count starts from the
   * parked keys (the blocked-key index): with nothing parked the pending rows
   * are never read (0.05 ms); otherwise one pass over the pending rows
   * probing a hash of the parked keys, the same rows the first query counts
   * (bench/status-queries.ts).
   */
  async destinationStatus(): Promise<DestinationStatus[]> {
    const n = this.names;
    const [dest, blocked] = await Promise.all([
      this.db.query<Record<string, unknown>>(`SELECT destination,
          count(*) FILTER (WHERE state = 'pending') AS pending,
          count(*) FILTER (WHERE state = 'pending' AND next_attempt_at > now()) AS backing_off,
          count(*) FILTER (WHERE state = 'parked') AS parked,
          extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')) AS oldest
        FROM ${n.outbox} WHERE state IN ('pending', 'parked') GROUP BY destination ORDER BY destination`),
      this.db.query<{ destination: string; blocked: string }>(`SELECT o.destination, count(*) AS blocked
        FROM (SELECT key, min(seq) AS seq FROM ${n.outbox} WHERE state = 'parked' GROUP BY key) p
        JOIN ${n.outbox} o ON o.key = p.key AND o.seq > p.seq AND o.state = 'pending'
        GROUP BY o.destination`),
    ]);
    const blockedBy = new Map(blocked.rows.map((r) => [r.destination, num(r.blocked)]));
    return dest.rows.map((r) => ({
      destination: String(r.destination),
      pending: num(r.pending),
      backingOff: num(r.backing_off),
      parked: num(r.parked),
      oldestPendingSeconds: r.oldest === null ? null : num(r.oldest),
      blockedByParked: blockedBy.get(String(r.destination)) ?? 0,
    }));
  }

  /** Every relay row (the heartbeat statement deletes rows idle for 24 hours), with its state judged by the database clock. */
  async relayStatus(): Promise<RelayStatus[]> {
    const n = this.names;
    // Rows written before migration 007 have no lease_ttl_ms: judged by the default TTL.
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT r.relay_id, r.host, r.pid, r.in_flight, r.published_total, r.rate_per_minute,
          coalesce(r.lease_ttl_ms, 30000) AS ttl,
          CASE WHEN r.left_at IS NOT NULL THEN 'left'
               WHEN r.heartbeat_at > now() - coalesce(r.lease_ttl_ms, 30000) * interval '1 millisecond' THEN 'alive'
               ELSE 'expired' END AS state,
          extract(epoch FROM now() - r.heartbeat_at) AS age,
          extract(epoch FROM now() - coalesce(r.left_at, r.heartbeat_at + coalesce(r.lease_ttl_ms, 30000) * interval '1 millisecond')) AS state_age,
          (SELECT count(*) FROM ${n.buckets} b WHERE b.owner = r.relay_id AND b.lease_until > now()) AS buckets
        FROM ${n.relays} r ORDER BY r.relay_id`);
    return rows.map((r) => {
      const state = String(r.state) as RelayState;
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
        heartbeatAgeSeconds: num(r.age),
      };
    });
  }

  async #publishedLastMinute(): Promise<number> {
    const { rows } = await this.db.query<{ c: string }>(`SELECT count(*) AS c FROM ${this.names.outbox} WHERE done_at > now() - interval '1 minute' AND state = 'published'`);
    return num(rows[0]?.c);
  }

  /** Size with indexes, live and dead rows, last autovacuum of the outbox table. */
  async tableStatus(): Promise<OutboxStatus['table']> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT pg_total_relation_size(c.oid) AS bytes, s.n_live_tup, s.n_dead_tup, s.last_autovacuum
        FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = $1::regclass`, [this.names.outbox]);
    const t = rows[0] ?? {};
    return {
      totalBytes: num(t.bytes),
      liveRows: num(t.n_live_tup),
      deadRows: num(t.n_dead_tup),
      lastAutovacuum: (t.last_autovacuum as Date | null) ?? null,
    };
  }

  /**
   * Open circuits of live relays (heartbeat in the last minute), by
   * destination then relay: destinations down, whose events wait pending.
   */
  async circuits(): Promise<DestinationCircuit[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(
      `SELECT r.relay_id, c.destination, c.reason, c."openSince" AS open_since, c."nextProbeAt" AS next_probe_at, c."failedProbes" AS failed_probes
       FROM ${this.names.relays} r,
            jsonb_to_recordset(r.circuits) AS c(destination text, reason text, "openSince" timestamptz, "nextProbeAt" timestamptz, "failedProbes" integer)
       WHERE r.heartbeat_at > now() - interval '1 minute'
       ORDER BY c.destination, r.relay_id`,
    );
    return rows.map((r) => ({
      destination: String(r.destination),
      relayId: String(r.relay_id),
      reason: String(r.reason ?? ''),
      openSince: new Date(r.open_since as Date),
      nextProbeAt: new Date(r.next_probe_at as Date),
      failedProbes: num(r.failed_probes),
    }));
  }

  /** Parked events, oldest first; their payloads only with `includePayload` (the CLI and the dashboard show none by default). */
  async listParked(options: { destination?: string; limit?: number; includePayload?: boolean } = {}): Promise<ParkedEvent[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(
      `SELECT seq, id, type, key, destination, attempts, last_error, parked_at${options.includePayload ? ', payload' : ''} FROM ${this.names.outbox}
       WHERE state = 'parked' AND ($1::text IS NULL OR destination = $1) ORDER BY seq LIMIT $2`,
      [options.destination ?? null, options.limit ?? 100],
    );
    return rows.map((r) => ({
      seq: num(r.seq),
      id: String(r.id),
      type: String(r.type),
      key: String(r.key),
      destination: String(r.destination),
      attempts: num(r.attempts),
      lastError: (r.last_error as string | null) ?? null,
      parkedAt: r.parked_at as Date,
      ...(options.includePayload ? { payload: r.payload } : {}),
    }));
  }

  /**
   * Events published in the last `seconds` per destination, from retained
   * rows (the done_at index): with delete-on-publish there are none to count.
   * The dashboard samples it for its publish-rate chart.
   */
  async publishedPerDestination(seconds = 60): Promise<{ destination: string; published: number }[]> {
    const { rows } = await this.db.query<{ destination: string; c: string }>(
      `SELECT destination, count(*) AS c FROM ${this.names.outbox}
       WHERE done_at > now() - $1 * interval '1 second' AND state = 'published' GROUP BY destination ORDER BY destination`,
      [seconds],
    );
    return rows.map((r) => ({ destination: String(r.destination), published: num(r.c) }));
  }

  /**
   * Makes parked events pending again with a fresh attempt count. Returns the ids changed.
   * Retry, skip and discard release the events held behind the parked ones in the same statement.
   */
  retryParked(selector: ParkedSelector, actor: string): Promise<string[]> {
    return this.#parkedAction('retry', `UPDATE ${this.names.outbox} o SET state = 'pending', attempts = 0, next_attempt_at = NULL, held_by = NULL`, selector, actor);
  }

  /** Marks parked events as skipped: they will not be published and no longer hold their key. */
  skipParked(selector: ParkedSelector, actor: string): Promise<string[]> {
    return this.#parkedAction('skip', `UPDATE ${this.names.outbox} o SET state = 'skipped', done_at = now()`, selector, actor);
  }

  /** Deletes parked events. The audit table keeps their ids. */
  discardParked(selector: ParkedSelector, actor: string): Promise<string[]> {
    return this.#parkedAction('discard', `DELETE FROM ${this.names.outbox} o`, selector, actor);
  }

  async #parkedAction(action: string, head: string, selector: ParkedSelector, actor: string): Promise<string[]> {
    const ids = 'ids' in selector ? [...selector.ids] : null;
    const destination = 'all' in selector ? (selector.destination ?? null) : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const { rows } = await this.db.query<{ id: string }>(
      `WITH changed AS (
         ${head} WHERE o.state = 'parked' AND ($1::uuid[] IS NULL OR o.id = ANY($1::uuid[]))
           AND ($2::text IS NULL OR o.destination = $2)
         RETURNING o.id, o.seq, o.last_error
       ), released AS (
         ${releaseHeldBy(this.names, 'ARRAY(SELECT seq FROM changed)')}
       ), audit AS (
         INSERT INTO ${this.names.audit} (action, event_id, seq, actor, detail)
         SELECT $3, id, seq, $4, last_error FROM changed
       )
       SELECT id FROM changed ORDER BY seq`,
      [ids, destination, action, actor],
    );
    return rows.map((r) => r.id);
  }

  /**
   * Re-publishes published events matching `filter` as new deliveries with
   * their original ids, appended in their original order after whatever is
   * pending. Works in chunks; `onProgress` is called after each. Audited
   * before the first copy (`replay-start`: an interrupted replay leaves its
   * id, which its copies carry as `replay_id`) and after the last (`replay`,
   * with the count).
   */
  async replay(filter: ReplayFilter, actor: string, onProgress?: (copied: number) => void, chunk = 5000): Promise<{ replayId: string; copied: number }> {
    const replayId = uuidv7();
    const n = this.names;
    await this.db.query(`INSERT INTO ${n.audit} (action, actor, detail) VALUES ('replay-start', $1, $2)`, [actor, JSON.stringify({ replayId, ...filter })]);
    let after = 0;
    let copied = 0;
    for (;;) {
      const { rows } = await this.db.query<{ copied: number; last: string | null }>(
        `WITH src AS (
           SELECT * FROM ${n.outbox}
           WHERE state = 'published' AND replay_id IS NULL AND seq > $1
             AND ($2::timestamptz IS NULL OR occurred_at >= $2) AND ($3::timestamptz IS NULL OR occurred_at < $3)
             AND ($4::text IS NULL OR key = $4) AND ($5::text IS NULL OR type = $5) AND ($6::text IS NULL OR destination = $6)
           ORDER BY seq LIMIT $7
         ), ins AS (
           INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, key, destination, payload, headers, occurred_at, version, replay_id)
           SELECT id, type, aggregate_type, aggregate_id, key, destination, payload,
                  headers || jsonb_build_object('txbox-replay-id', $8::text), occurred_at, version, $8::uuid
           FROM src ORDER BY seq
           RETURNING 1
         )
         SELECT (SELECT count(*) FROM ins)::int AS copied, (SELECT max(seq) FROM src)::text AS last`,
        [after, filter.from ?? null, filter.to ?? null, filter.key ?? null, filter.type ?? null, filter.destination ?? null, chunk, replayId],
      );
      const r = rows[0]!;
      copied += r.copied;
      if (r.copied > 0) onProgress?.(copied);
      if (r.last === null || r.copied < chunk) break;
      after = Number(r.last);
    }
    await this.db.query(`INSERT INTO ${n.audit} (action, actor, detail) VALUES ('replay', $1, $2)`, [
      actor,
      JSON.stringify({ replayId, copied, ...filter }),
    ]);
    return { replayId, copied };
  }

  /** Deletes published and skipped rows older than `olderThanMs`, `batchSize` rows per statement. Never touches pending or parked rows. */
  async prune(olderThanMs: number, batchSize = 5000, onProgress?: (deleted: number) => void): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive whole number, e.g. 5000');
    let deleted = 0;
    for (;;) {
      const n = await pruneOnce(this.db, this.names, olderThanMs, batchSize);
      deleted += n;
      if (n > 0) onProgress?.(deleted);
      if (n < batchSize) return deleted;
    }
  }
}

/** One bounded retention batch; SKIP LOCKED so that several relays pruning at once do not wait on each other. */
export async function pruneOnce(db: PostgresConnection, n: PostgresNames, olderThanMs: number, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ deleted: number }>(
    `WITH doomed AS (
       SELECT seq FROM ${n.outbox}
       WHERE done_at < now() - $1 * interval '1 millisecond' AND state IN ('published', 'skipped')
       ORDER BY done_at LIMIT $2 FOR UPDATE SKIP LOCKED
     ), gone AS (
       DELETE FROM ${n.outbox} o USING doomed d WHERE o.seq = d.seq RETURNING 1
     )
     SELECT count(*)::int AS deleted FROM gone`,
    [olderThanMs, batchSize],
  );
  return rows[0]!.deleted;
}
