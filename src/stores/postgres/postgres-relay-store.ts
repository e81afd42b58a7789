import { performance } from 'node:perf_hooks';
import { ConfigError } from '../../core/errors.ts';
import type { StoredEvent } from '../../core/envelope.ts';
import type { BucketLease, ClaimOptions, Completion, RelayHeartbeat, RelayStore } from '../../core/ports.ts';
import { pruneOnce } from './postgres-admin.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { statementName } from './prepared.ts';
import {
  claimSql,
  completeSql,
  heartbeatSql,
  holdSql,
  leaseSql,
  leaveSql,
  postgresNames,
  releaseHeldSql,
  releaseSql,
  type PostgresNames,
  type PostgresNamesOptions,
} from './postgres-sql.ts';

export interface PostgresRelayStoreOptions extends PostgresNamesOptions {
  /** The database handle the relay uses (not the app's transaction). */
  readonly connection: PostgresConnection;
  /**
   * Delete rows when they are published instead of keeping them for
   * `txbox replay` until retention removes them. Default: false.
   */
  readonly deleteOnPublish?: boolean;
  /**
   * How often the claim first releases rows held behind a row that no longer
   * blocks them (left by a statement of an older txbox, see migration 005).
   * Default: 30000 ms.
   */
  readonly releaseHeldEveryMs?: number;
}

interface EventRow {
  seq: string;
  id: string;
  type: string;
  aggregate_type: string;
  aggregate_id: string;
  key: string;
  bucket: number;
  destination: string;
  /** Text: the claim selects `payload::text`. */
  payload: string;
  headers: Record<string, string>;
  occurred_at: Date | string;
  version: string | number | null;
  attempts: number;
  routes_done: string[] | null;
}

export function rowToEvent(r: EventRow): StoredEvent {
  const json = r.payload;
  let parsed: unknown;
  let isParsed = false;
  return {
    seq: Number(r.seq),
    id: r.id,
    type: r.type,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    key: r.key,
    bucket: r.bucket,
    destination: r.destination,
    payloadJson: json,
    // Parsed on first read only: transports send payloadJson as it is.
    get payload(): unknown {
      if (!isParsed) {
        parsed = JSON.parse(json);
        isParsed = true;
      }
      return parsed;
    },
    headers: r.headers,
    occurredAt: r.occurred_at instanceof Date ? r.occurred_at : new Date(r.occurred_at),
    version: r.version === null ? null : Number(r.version),
    attempts: r.attempts,
    routesDone: r.routes_done ?? [],
  };
}

function resolveReleaseHeldEveryMs(value: number | undefined): number {
  if (value === undefined) return 30_000;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ConfigError('releaseHeldEveryMs', `must be a whole number of milliseconds >= 0, got ${String(value)}`);
  }
  return value;
}

const OUTCOME_CODE = { published: 0, retry: 1, park: 2, defer: 3 } as const;

/** The relay side of a PostgreSQL or PGlite outbox table. */
export class PostgresRelayStore implements RelayStore {
  readonly names: PostgresNames;
  readonly #db: PostgresConnection;
  readonly #sql: {
    heartbeat: string;
    lease: string;
    release: string;
    leave: string;
    claim: string;
    complete: string;
    hold: string;
    releaseHeld: string;
  };
  readonly #releaseHeldEveryMs: number;
  /** The destinations whose parked events do not block, as the relay's claims give them. */
  #skip: readonly string[] = [];
  #releasedHeldAt = Number.NEGATIVE_INFINITY;
  readonly #names: { claim: string };
  readonly #waiters = new Set<() => void>();
  #unlisten: (() => Promise<void>) | undefined;
  #listening: Promise<void> | undefined;
  #wakeups = 0;

  constructor(options: PostgresRelayStoreOptions) {
    this.names = postgresNames(options);
    this.#db = options.connection;
    this.#sql = {
      heartbeat: heartbeatSql(this.names),
      lease: leaseSql(this.names),
      release: releaseSql(this.names),
      leave: leaveSql(this.names),
      claim: claimSql(this.names),
      complete: completeSql(this.names, options.deleteOnPublish ?? false),
      hold: holdSql(this.names),
      releaseHeld: releaseHeldSql(this.names),
    };
    this.#releaseHeldEveryMs = resolveReleaseHeldEveryMs(options.releaseHeldEveryMs);
    // The claim's outer statement (a call of the claim function, which plans its query per
    // call) runs prepared. The complete statement is planned per call: a generic plan cannot
    // see the batch size or the table's growth, and drained 20-40% slower (docs/performance-notes.md, finding 7).
    this.#names = { claim: statementName(this.#sql.claim) };
  }

  async heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    const { rows } = await this.#db.query<{ live: number; bucket_count: number; next_foreign_expiry_ms: number | null }>(this.#sql.heartbeat, [
      relay.relayId,
      relay.host,
      relay.pid,
      relay.inFlight,
      relay.publishedTotal,
      relay.ratePerMinute,
      ttlMs,
      JSON.stringify(relay.circuits ?? []),
    ]);
    const r = rows[0]!;
    return { liveRelays: r.live, bucketCount: r.bucket_count, nextForeignExpiryMs: r.next_foreign_expiry_ms === null ? null : Number(r.next_foreign_expiry_ms) };
  }

  async lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number): Promise<BucketLease[]> {
    const { rows } = await this.#db.query<{ bucket: number; token: string }>(this.#sql.lease, [
      relayId,
      held.map((l) => l.bucket),
      held.map((l) => l.token),
      ttlMs,
      Math.max(0, acquire),
    ]);
    return rows.map((r) => ({ bucket: r.bucket, token: r.token }));
  }

  async release(relayId: string, leases: readonly BucketLease[]): Promise<void> {
    if (leases.length === 0) return;
    await this.#db.query(this.#sql.release, [relayId, leases.map((l) => l.bucket), leases.map((l) => l.token)]);
  }

  /** Pending and parked events: one pass over the open rows (the partial index of pending and parked rows), for the relay's log summary. */
  async backlog(): Promise<{ pending: number; parked: number }> {
    const { rows } = await this.#db.query<{ pending: string; parked: string }>(
      `SELECT count(*) FILTER (WHERE state = 'pending') AS pending, count(*) FILTER (WHERE state = 'parked') AS parked
       FROM ${this.names.outbox} WHERE state IN ('pending', 'parked')`,
    );
    return { pending: Number(rows[0]!.pending), parked: Number(rows[0]!.parked) };
  }

  async leave(relayId: string): Promise<void> {
    await this.#db.query(this.#sql.leave, [relayId]);
  }

  async claim(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[]> {
    if (leases.length === 0) return [];
    this.#skip = options.skipParkedDestinations;
    const now = performance.now();
    if (now - this.#releasedHeldAt >= this.#releaseHeldEveryMs) {
      this.#releasedHeldAt = now;
      await this.releaseHeld();
    }
    const { rows } = await this.#db.query<EventRow>(this.#sql.claim, [
      leases.map((l) => l.bucket),
      options.limit,
      options.skipParkedDestinations,
    ], this.#names.claim);
    return rows.map(rowToEvent);
  }

  async complete(relayId: string, completions: readonly Completion[]) {
    if (completions.length === 0) return { applied: 0, rejected: 0 };
    const seqs: number[] = [];
    const tokens: string[] = [];
    const outcomes: number[] = [];
    const delays: number[] = [];
    const errors: (string | null)[] = [];
    const routes: string[] = [];
    for (const c of completions) {
      seqs.push(c.seq);
      tokens.push(c.token);
      outcomes.push(OUTCOME_CODE[c.outcome]);
      delays.push(c.outcome === 'retry' || c.outcome === 'defer' ? Math.min(c.delayMs, 2 ** 31 - 1) : 0);
      errors.push(c.outcome === 'published' ? null : c.error.slice(0, 2000));
      routes.push(c.outcome === 'published' ? '' : (c.routesAcked ?? []).join(','));
    }
    const params = [relayId, seqs, tokens, outcomes, delays, errors, routes];
    const failed = completions.filter((c) => c.outcome !== 'published').map((c) => c.seq);
    const applied = (await this.#db.query<{ applied: number }>(this.#sql.complete, params)).rows[0]!.applied;
    if (failed.length > 0) {
      // Holds the rows queued behind the events that now back off or park, after the
      // complete statement committed: at the start of an outage this can update many rows,
      // and must not keep the lease rows the complete statement share-locks, which the
      // lease renewal waits for. Holding only spares the claim work: if it fails, or a
      // blocker ends while it runs, the claim's own check still keeps order, and
      // `releaseHeld` frees what it held too late.
      await this.#db.query(this.#sql.hold, [failed, this.#skip]).catch(() => {});
    }
    return { applied, rejected: completions.length - applied };
  }

  /**
   * Releases rows held behind rows that no longer block them (see migration
   * 005). The claim runs it every `releaseHeldEveryMs`; returns the rows released.
   */
  async releaseHeld(): Promise<number> {
    const { rows } = await this.#db.query<{ released: number }>(this.#sql.releaseHeld, [this.#skip]);
    return rows[0]!.released;
  }

  prune(olderThanMs: number, limit: number): Promise<number> {
    return pruneOnce(this.#db, this.names, olderThanMs, limit);
  }

  wakeups(): number {
    return this.#wakeups;
  }

  async waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number): Promise<void> {
    this.#listening ??= this.#db
      .listen(this.names.channel, () => {
        this.#wakeups++;
        for (const wake of this.#waiters) wake();
      })
      .then((unlisten) => {
        this.#unlisten = unlisten;
      });
    try {
      await this.#listening;
    } catch {
      this.#listening = undefined; // LISTEN unavailable now: fall back to polling, retry next time
    }
    if (since !== undefined && this.#wakeups !== since) return;
    if (signal.aborted) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done, { once: true });
      this.#waiters.add(done);
    });
  }


  async close(): Promise<void> {
    for (const wake of this.#waiters) wake();
    await this.#listening?.catch(() => {});
    await this.#unlisten?.();
    this.#unlisten = undefined;
    this.#listening = undefined;
  }
}
