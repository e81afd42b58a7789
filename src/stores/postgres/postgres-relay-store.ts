import { performance } from 'node:perf_hooks';
import { ConfigError } from '../../core/errors.ts';
import { millisOption } from '../../core/duration.ts';
import { storedEvent, type StoredEvent } from '../../core/envelope.ts';
import { scrubErrorText } from '../../core/error-text.ts';
import type { BucketLease, ClaimOptions, Completion, OutboxGauges, RelayHeartbeat, RelayStore, WakeSlotLag } from '../../core/ports.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';
import { PostgresWalWake } from './postgres-wal-wake.ts';
import { WalClaimTargets } from './postgres-wal-targets.ts';
import type { WalCommit } from './pg-wal-stream.ts';
import { walSlots } from './postgres-wal.ts';
import { pruneOnce } from './postgres-admin.ts';
import { boundedConnection, type PostgresConnection } from './postgres-connection.ts';
import { statementName } from './prepared.ts';
import {
  claimSeqsSql,
  claimSql,
  completeFnSql,
  completePublishedSql,
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
   * Wait for the WAL flush of each mark (the statement that records a batch
   * published, retried or parked). Default: false: marks commit
   * asynchronously, which takes the flush (0.5-2 ms here) off every batch's
   * path. What it risks is duplicates, never loss or reorder: a database crash
   * can undo the marks of its last moments (at most 3 x wal_writer_delay),
   * and those events are published again, as after a relay crash. Leases,
   * heartbeats and the producers' inserts always commit synchronously.
   */
  readonly synchronousMarks?: boolean;
  /**
   * How often the claim first releases rows held behind a row that no longer
   * blocks them (left by a statement of an older txbox, see migration 005).
   * Default: 30000 ms.
   */
  readonly releaseHeldEveryMs?: number;
  /**
   * How an idle relay learns of new events. `notify`: LISTEN for the
   * producers' NOTIFY, and poll. `wal`: follow the outbox table's inserts
   * through a temporary logical replication slot (`pgoutput`, a publication on
   * the outbox table only), so producers need no NOTIFY (give their
   * PostgresOutboxStore `notify: false`). Needs wal_level=logical and the
   * REPLICATION attribute; without them, and while the stream is down, the
   * store warns once and falls back to `notify` and polling. The table stays
   * the source of truth either way (docs/wal.md). Default: `notify`.
   */
  readonly wake?: 'notify' | 'wal';
  /**
   * WAL mode: a lane claims the rows commits announced by their seq while it
   * has seen everything else in its buckets, and runs its ordinary claim at
   * least this often under a steady stream of commits (and after every poll),
   * for rows no commit announces: an operator's retry, or a backoff set by the
   * relay that had the bucket before (docs/wal.md). Default: 1000 ms.
   */
  readonly walFullClaimEveryMs?: number;
  /**
   * The longest the relay waits for the answer to one of its statements
   * (claims, marks, lease renewals, retention). Past it the statement fails
   * as an outage (retried) and its connection is dropped, so that a database
   * gone silent (a host lost, a firewall that dropped the connections' state)
   * holds nothing up: TCP alone would take about 15 minutes to notice. Lease
   * renewals wait at most the lease TTL. Ignored by PGlite. Default: 30000 ms.
   */
  readonly statementTimeoutMs?: number;
  /** For the WAL mode's warnings. Default: silent. */
  readonly logger?: Logger;
  /**
   * Diagnostics for the WAL mode (bench/wal.ts times its stages with it):
   * called with each committed transaction the stream read (its rows' `seq`
   * and key bytes, the server's commit time), before the relay is woken. Keep it cheap.
   */
  readonly walTrace?: (commit: WalCommit) => void;
}

/** A relay lane waiting in `waitForEvents`: woken by commits in its buckets (all when `buckets` is null). */
interface Waiter {
  readonly done: () => void;
  readonly buckets: Uint8Array | null;
}

/** How the store wakes its relay now, and the lag of its replication slot (WAL mode). */
export interface WakeStatus {
  /** `wal`: streaming; `fallback`: WAL mode asked, but LISTEN/NOTIFY and polling for now; `starting`: the stream is opening. */
  readonly mode: 'notify' | 'wal' | 'fallback' | 'starting';
  readonly slot: string | null;
  /** WAL the slot retains past what the relay confirmed (the `txbox_relay_wal_slot_lag_bytes` gauge). */
  readonly slotLagBytes: number | null;
  /** Seconds since the relay last confirmed its stream (the `txbox_relay_wal_slot_confirmed_age_seconds` gauge); null when the server has no reply yet. */
  readonly slotConfirmedAgeSeconds: number | null;
}

export interface EventRow {
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
  /** occurred_at in whole epoch ms. */
  occurred_ms: number;
  version: string | number | null;
  attempts: number;
  routes_done: string[] | null;
  /** created_at in epoch ms (float8: cheaper to read than a timestamp). */
  created_ms?: number | null;
}

/** Completions up to this many are marked through migration 010's function (see the constructor). */
const SMALL_COMPLETE = 64;

/** Whether `items` still has the buckets `cached` was made from, in order. */
function sameBuckets<T>(cached: readonly number[], items: readonly T[], bucketOf: (item: T) => number): boolean {
  if (cached.length !== items.length) return false;
  for (let i = 0; i < items.length; i++) if (bucketOf(items[i]!) !== cached[i]) return false;
  return true;
}
const leaseBucket = (l: BucketLease): number => l.bucket;
const itself = (b: number): number => b;

/** One claimed row as a StoredEvent (`payload` parsed on first read only). */
export function rowToEvent(r: EventRow): StoredEvent {
  return storedEvent({
    seq: Number(r.seq),
    id: r.id,
    type: r.type,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    key: r.key,
    bucket: r.bucket,
    destination: r.destination,
    payloadJson: r.payload,
    headers: r.headers,
    occurredAt: new Date(r.occurred_ms),
    version: r.version === null ? null : Number(r.version),
    attempts: r.attempts,
    routesDone: r.routes_done ?? [],
    createdAtMs: r.created_ms ?? undefined,
  });
}


/** How the relay's claims ran (WAL mode: by seq, or answered without a query). */
export interface ClaimStats {
  /** Ordinary claims (`<table>_claim`). */
  readonly ordinary: number;
  /** Claims of announced rows by seq (`<table>_claim_seqs`, WAL mode). */
  readonly bySeq: number;
  /** Claims answered without a query: nothing announced, everything else seen (WAL mode). */
  readonly skipped: number;
}

const OUTCOME_CODE = { published: 0, retry: 1, park: 2, defer: 3 } as const;

/** The relay side of a PostgreSQL or PGlite outbox table. */
export class PostgresRelayStore implements RelayStore {
  readonly names: PostgresNames;
  readonly #db: PostgresConnection;
  readonly #timeoutMs: number;
  readonly #sql: {
    heartbeat: string;
    lease: string;
    release: string;
    leave: string;
    claim: string;
    claimSeqs: string;
    complete: string;
    completeSmall: string;
    completePublished: string;
    hold: string;
    releaseHeld: string;
  };
  /** Whether small batches are marked through migration 010's function (false once the server says it has none). */
  #completeFn = true;
  readonly #releaseHeldEveryMs: number;
  /** The destinations whose parked events do not block, as the relay's claims give them. */
  #skip: readonly string[] = [];
  #releasedHeldAt = Number.NEGATIVE_INFINITY;
  readonly #names: { claim: string; claimSeqs: string; completeSmall: string; completePublished: string };
  readonly #waiters = new Set<Waiter>();
  #unlisten: (() => Promise<void>) | undefined;
  #listening: Promise<void> | undefined;
  #wakeups = 0;
  /** Wake-ups for every bucket (NOTIFY, a WAL stream (re)start, rows whose bucket is not known). */
  #wakeupsAll = 0;
  /** WAL wake-ups per bucket. */
  readonly #bucketWakeups = new Float64Array(256);
  /** The buckets of this relay's leases, from its last lease() (null: not known yet). */
  #held: Uint8Array | null = null;
  /**
   * Buckets some lane has claimed or waited for since the leases last changed
   * (`wakeups(buckets)`, `waitForEvents(..., buckets)`): a commit in a listed
   * bucket with no lane waiting on it belongs to a lane that is busy, and will
   * be seen by its wake-up count; one in a held bucket nobody listed wakes everyone.
   */
  readonly #listed = new Uint8Array(256);
  readonly #leasers = new Set<string>();
  readonly #wal: PostgresWalWake | undefined;
  /**
   * A lane's buckets, as a list and as the claims' smallint[] parameter, and as a 256-entry mask for its
   * waits: made once per leases array (the relay passes the same one until its leases change), not at
   * every claim and wait. Looked up by identity and checked element by element (another caller may
   * change its array between calls).
   */
  readonly #buckets = new WeakMap<readonly BucketLease[], { readonly buckets: readonly number[]; readonly param: string }>();
  readonly #interest = new WeakMap<readonly number[], { readonly buckets: readonly number[]; readonly mask: Uint8Array }>();
  /** Per bucket: a WAL commit woke the relay and no claim of that bucket has returned rows since. */
  readonly #recheck = new Uint8Array(256);
  /** WAL mode: the announced rows a lane may claim by seq (undefined: ordinary claims only). */
  #targets: WalClaimTargets | undefined;
  readonly #logger: Logger;
  #relayId = 'relay';
  #stats = { ordinary: 0, bySeq: 0, skipped: 0 };

  constructor(options: PostgresRelayStoreOptions) {
    this.names = postgresNames(options);
    this.#timeoutMs = millisOption('statementTimeoutMs', options.statementTimeoutMs, 30_000, 100);
    this.#db = boundedConnection(options.connection, this.#timeoutMs);
    if (options.wake !== undefined && options.wake !== 'notify' && options.wake !== 'wal') {
      throw new ConfigError('wake', `must be 'notify' or 'wal', got ${JSON.stringify(options.wake)}`);
    }
    this.#logger = options.logger ?? silentLogger;
    if (options.wake === 'wal') {
      const targets = (this.#targets = new WalClaimTargets(millisOption('walFullClaimEveryMs', options.walFullClaimEveryMs, 1000, 1)));
      this.#wal = new PostgresWalWake({
        connection: this.#db,
        names: this.names,
        logger: this.#logger,
        relayId: () => this.#relayId,
        onWake: (buckets, seqs = null) => {
          if (buckets === null) {
            this.#recheck.fill(1);
            targets.forgetAll();
          } else {
            for (const b of buckets) this.#recheck[b] = 1;
            this.#announce(buckets, seqs);
          }
          this.#notified(buckets);
        },
        onFallback: () => {
          this.#listen().catch(() => {});
        },
        trace: options.walTrace,
      });
    }
    this.#sql = {
      heartbeat: heartbeatSql(this.names),
      lease: leaseSql(this.names),
      release: releaseSql(this.names),
      leave: leaveSql(this.names),
      claim: claimSql(this.names),
      claimSeqs: claimSeqsSql(this.names),
      complete: completeSql(this.names, options.deleteOnPublish ?? false, options.synchronousMarks ?? false),
      completeSmall: completeFnSql(this.names, options.deleteOnPublish ?? false, options.synchronousMarks ?? false),
      completePublished: completePublishedSql(this.names, options.deleteOnPublish ?? false, options.synchronousMarks ?? false),
      hold: holdSql(this.names),
      releaseHeld: releaseHeldSql(this.names),
    };
    this.#releaseHeldEveryMs = millisOption('releaseHeldEveryMs', options.releaseHeldEveryMs, 30_000, 0);
    // The claim's outer statement (a call of the claim function, which plans its query per
    // call) runs prepared. The complete statement of a large batch is planned per call: a generic plan
    // cannot see the batch size or the table's growth, and drained 20-40% slower (docs/performance-notes.md,
    // finding 7). A small one (at most SMALL_COMPLETE events: low rates, the WAL mode's marks) calls the
    // same statement in a PL/pgSQL function (migration 010) that keeps an index-only plan for the session:
    // parsing and planning the statement took longer than running it for a few rows.
    // The claim by seq (WAL mode) calls a PL/pgSQL function, which keeps its plan for the session too.
    // A large batch whose every event was published (a drain's batches) is marked by completePublishedSql's
    // statement, fenced per bucket, prepared: its plan (an index scan of the seqs) does not depend on the
    // batch's size, and it took about a quarter less time than the statement planned per call.
    this.#names = {
      claim: statementName(this.#sql.claim),
      claimSeqs: statementName(this.#sql.claimSeqs),
      completeSmall: statementName(this.#sql.completeSmall),
      completePublished: statementName(this.#sql.completePublished),
    };
  }

  async heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    this.#relayId = relay.relayId;
    const { rows } = await this.#db.query<{ live: number; bucket_count: number; next_foreign_expiry_ms: number | null }>(this.#sql.heartbeat, [
      relay.relayId,
      relay.host,
      relay.pid,
      relay.inFlight,
      relay.publishedTotal,
      relay.ratePerMinute,
      ttlMs,
      JSON.stringify(relay.circuits ?? []),
    ], undefined, Math.min(this.#timeoutMs, ttlMs));
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
    ], undefined, Math.min(this.#timeoutMs, ttlMs));
    // One store serving two relays would mix their leases: then wake by every held bucket.
    this.#leasers.add(relayId);
    const mine = new Uint8Array(256);
    for (const r of rows) mine[r.bucket] = 1;
    const before = this.#held;
    this.#held = this.#leasers.size === 1 ? mine : null;
    // The lanes share the new leases out among themselves: until each lists its buckets again, wake everyone.
    if (before === null || this.#held === null || !before.every((v, b) => v === mine[b])) this.#listed.fill(0);
    return rows.map((r) => ({ bucket: r.bucket, token: r.token }));
  }

  async release(relayId: string, leases: readonly BucketLease[]): Promise<void> {
    if (leases.length === 0) return;
    await this.#db.query(this.#sql.release, [relayId, leases.map((l) => l.bucket), leases.map((l) => l.token)]);
    if (this.#held) for (const l of leases) this.#held[l.bucket] = 0;
  }

  /** Pending and parked events: one pass over the open rows (the partial index of pending and parked rows), for the relay's log summary. */
  async backlog(): Promise<{ pending: number; parked: number }> {
    const { rows } = await this.#db.query<{ pending: string; parked: string }>(
      `SELECT count(*) FILTER (WHERE state = 'pending') AS pending, count(*) FILTER (WHERE state = 'parked') AS parked
       FROM ${this.names.outbox} WHERE state IN ('pending', 'parked')`,
    );
    return { pending: Number(rows[0]!.pending), parked: Number(rows[0]!.parked) };
  }

  /**
   * Pending, parked and the oldest pending event's age per destination, and
   * the relays alive: one statement, for the metrics gauges (the relay caches
   * it and reads it only when metrics are collected). One pass over the open
   * rows, like `backlog()` (cost: docs/performance.md, bench/metrics-gauges.ts).
   */
  async outboxGauges(): Promise<OutboxGauges> {
    const n = this.names;
    const { rows } = await this.#db.query<{ destination: string | null; pending: string; parked: string; oldest: number | null; alive: string }>(
      `SELECT d.destination, d.pending, d.parked, d.oldest, r.alive FROM
         (SELECT count(*) AS alive FROM ${n.relays}
           WHERE left_at IS NULL AND heartbeat_at > now() - coalesce(lease_ttl_ms, 30000) * interval '1 millisecond') r
       LEFT JOIN (SELECT destination,
           count(*) FILTER (WHERE state = 'pending') AS pending,
           count(*) FILTER (WHERE state = 'parked') AS parked,
           extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending'))::float8 AS oldest
         FROM ${n.outbox} WHERE state IN ('pending', 'parked') GROUP BY destination) d ON true`,
    );
    return {
      relaysAlive: Number(rows[0]?.alive ?? 0),
      destinations: rows
        .filter((r) => r.destination !== null)
        .map((r) => ({ destination: r.destination!, pending: Number(r.pending), parked: Number(r.parked), oldestPendingSeconds: r.oldest === null ? 0 : Math.max(0, Number(r.oldest)) })),
    };
  }

  async leave(relayId: string, held: readonly BucketLease[]): Promise<void> {
    await this.#db.query(this.#sql.leave, [relayId, held.map((l) => l.bucket), held.map((l) => l.token)]);
    if (this.#held) for (const l of held) this.#held[l.bucket] = 0;
  }

  async claim(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[]> {
    if (leases.length === 0) return [];
    this.#skip = options.skipParkedDestinations;
    const now = performance.now();
    if (now - this.#releasedHeldAt >= this.#releaseHeldEveryMs) {
      this.#releasedHeldAt = now;
      if ((await this.releaseHeld()) > 0) this.#targets?.forgetAll();
    }
    const { buckets, param } = this.#bucketsOf(leases);
    // WAL mode, streaming: claim only the rows commits announced when nothing else can be waiting (postgres-wal-targets.ts).
    const targets = this.#wal?.streaming ? this.#targets : undefined;
    const announced = await this.#claimAnnounced(leases, options, now);
    // Nothing to publish, and only the ordinary claim can tell what holds the rows back: run it now, not after a wait.
    if (announced !== null) return announced;
    this.#stats.ordinary++;
    const { rows } = await this.#db.query<EventRow>(this.#sql.claim, [param, options.limit, options.skipParkedDestinations], this.#names.claim);
    const events = rows.map(rowToEvent);
    targets?.afterFull(leases, events, options.limit, now);
    if (rows.length > 0) for (const b of buckets) this.#recheck[b] = 0;
    return events;
  }

  /**
   * WAL mode, streaming: the claim by seq of the rows commits announced, while
   * this relay's previous batch of these buckets is still being marked. Its
   * rows are not announced again, and `<table>_claim_seqs` returns no row with
   * an earlier open row of its key (a row of that batch included), so it can
   * run before the marks; null when only the ordinary claim can tell what is
   * claimable (not streaming, buckets not seen, a row missing twice).
   */
  async claimWhileMarking(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[] | null> {
    if (leases.length === 0) return [];
    if (this.#targets === undefined || !this.#wal?.streaming) return null;
    this.#skip = options.skipParkedDestinations;
    return this.#claimAnnounced(leases, options, performance.now());
  }

  /**
   * The claim of announced rows (WAL mode, streaming: postgres-wal-targets.ts),
   * or `[]` without a query when nothing was announced and everything else was
   * seen; null when the ordinary claim must run instead.
   */
  async #claimAnnounced(leases: readonly BucketLease[], options: ClaimOptions, now: number): Promise<StoredEvent[] | null> {
    const targets = this.#wal?.streaming ? this.#targets : undefined;
    const plan = targets?.plan(leases, now);
    if (plan === undefined || plan.kind === 'full') return null;
    if (plan.kind === 'none') {
      this.#stats.skipped++;
      return [];
    }
    this.#stats.bySeq++;
    const { buckets, param } = this.#bucketsOf(leases);
    let rows: EventRow[];
    try {
      ({ rows } = await this.#db.query<EventRow>(this.#sql.claimSeqs, [plan.seqs, param, options.limit, options.skipParkedDestinations], this.#names.claimSeqs));
    } catch (err) {
      targets!.forget(buckets);
      if ((err as { code?: unknown }).code !== '42883') throw err;
      // undefined_function: the outbox was not migrated to version 8 yet. Ordinary claims only, as before it.
      this.#targets = undefined;
      this.#logger.warn({ outbox: this.names.outbox }, 'txbox relay: the WAL mode claims announced rows with a function of migration 008, which this outbox lacks; run txbox migrate (claiming as before meanwhile)');
      return null;
    }
    const events = rows.map(rowToEvent);
    const ordinaryNext = targets!.afterSeqs(leases, plan, events, options.limit, now);
    if (rows.length > 0) for (const b of buckets) this.#recheck[b] = 0;
    return events.length > 0 || !ordinaryNext ? events : null;
  }

  #bucketsOf(leases: readonly BucketLease[]): { readonly buckets: readonly number[]; readonly param: string } {
    let entry = this.#buckets.get(leases);
    if (entry === undefined || !sameBuckets(entry.buckets, leases, leaseBucket)) {
      const buckets = leases.map(leaseBucket);
      entry = { buckets, param: `{${buckets.join(',')}}` };
      this.#buckets.set(leases, entry);
    }
    return entry;
  }

  /** How the claims ran so far (diagnostics: bench/wal.ts, tests). */
  claimStats(): ClaimStats {
    return { ...this.#stats };
  }

  /** WAL mode: a commit inserted rows with these seqs in these buckets; those of buckets this relay does not lease are no concern of its claims. */
  #announce(buckets: readonly number[], seqs: readonly number[] | null): void {
    const targets = this.#targets;
    if (targets === undefined) return;
    const held = this.#held;
    if (held === null || seqs === null || seqs.length !== buckets.length) {
      targets.announce(buckets, seqs);
      return;
    }
    let mine = 0;
    for (const b of buckets) mine += held[b]!;
    if (mine === buckets.length) targets.announce(buckets, seqs);
    else if (mine > 0) {
      const bs: number[] = [];
      const ss: number[] = [];
      for (let i = 0; i < buckets.length; i++) {
        if (held[buckets[i]!] === 1) {
          bs.push(buckets[i]!);
          ss.push(seqs[i]!);
        }
      }
      targets.announce(bs, ss);
    }
  }

  async complete(relayId: string, completions: readonly Completion[]) {
    if (completions.length === 0) return { applied: 0, rejected: 0 };
    const byBucket = completions.length > SMALL_COMPLETE ? publishedByBucket(completions) : undefined;
    if (byBucket !== undefined) {
      const params = [relayId, completions.map((c) => c.seq), byBucket.buckets, byBucket.tokens];
      const { rows } = await this.#db.query<{ applied: number; released: number }>(this.#sql.completePublished, params, this.#names.completePublished);
      // WAL mode: rows released from a hold are not announced by the stream.
      if (rows[0]!.released > 0) this.#targets?.forgetAll();
      return { applied: rows[0]!.applied, rejected: completions.length - rows[0]!.applied };
    }
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
      // Whole milliseconds for the integer[] parameter (a completion from other code may carry fractions or NaN).
      delays.push(c.outcome === 'retry' || c.outcome === 'defer' ? (Number.isFinite(c.delayMs) ? Math.min(Math.max(0, Math.ceil(c.delayMs)), 2 ** 31 - 1) : 0) : 0);
      errors.push(c.outcome === 'published' ? null : scrubErrorText(c.error));
      routes.push(c.outcome === 'published' ? '' : (c.routesAcked ?? []).join(','));
    }
    const params = [relayId, seqs, tokens, outcomes, delays, errors, routes];
    const failed = completions.filter((c) => c.outcome !== 'published').map((c) => c.seq);
    const { applied, released } = await this.#mark(completions.length, params);
    if (this.#targets !== undefined) {
      // WAL mode: rows released from a hold, and retries or deferrals coming due, are not announced by the stream.
      if (released > 0) this.#targets.forgetAll();
      const now = performance.now();
      for (const c of completions) if (c.outcome === 'retry' || c.outcome === 'defer') this.#targets.dueAt(now + c.delayMs);
    }
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

  /** Runs the mark: through migration 010's function for a small batch (until a server says it has none), else the statement. */
  async #mark(size: number, params: unknown[]): Promise<{ applied: number; released: number }> {
    if (size <= SMALL_COMPLETE && this.#completeFn) {
      try {
        return (await this.#db.query<{ applied: number; released: number }>(this.#sql.completeSmall, params, this.#names.completeSmall)).rows[0]!;
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (code !== '42883' && code !== '42501') throw err;
        // undefined_function: the outbox was not migrated to version 10 yet; insufficient_privilege: the
        // relay's role may not execute it. The statement, as before it (nothing was marked: the call failed).
        this.#completeFn = false;
        this.#logger.warn(
          { outbox: this.names.outbox, function: this.names.completeFn },
          code === '42883'
            ? 'txbox relay: small batches are marked by a function of migration 010, which this outbox lacks; run txbox migrate (marking as before meanwhile)'
            : "txbox relay: the relay's role may not execute the mark function of migration 010; GRANT EXECUTE on it to the role (marking as before meanwhile)",
        );
      }
    }
    return (await this.#db.query<{ applied: number; released: number }>(this.#sql.complete, params)).rows[0]!;
  }

  /**
   * Readies `connections` connections at once, each in a transaction of its own (so that each is a
   * different connection): the claim function, migration 010's mark function and, in the WAL mode, the
   * claim by seq, each called once with nothing to do. A connection's first call of a function compiles
   * and plans it (PL/pgSQL), 7-15 ms on a slow machine where the next call takes 1 ms, and its connect
   * took 11-12 ms more: the first events after a relay starts (or takes over) paid for both. Nothing is changed (no buckets, no seqs). Errors are ignored: an outbox of an
   * older migration, a role without EXECUTE, a database not there yet only leave a connection cold.
   */
  async warm(connections: number): Promise<void> {
    const none: never[] = [];
    await Promise.all(
      Array.from({ length: Math.max(0, Math.floor(connections)) }, () =>
        this.#db
          .transaction(async (tx) => {
            await tx.query(this.#sql.claim, [none, 1, none]);
            if (this.#completeFn) await tx.query(this.#sql.completeSmall, ['', none, none, none, none, none, none]);
            if (this.#targets !== undefined) await tx.query(this.#sql.claimSeqs, [none, none, 1, none]);
          }, this.#timeoutMs)
          .catch(() => {}),
      ),
    );
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

  /**
   * Wake-ups received so far; with `buckets`, only those that concern them
   * (in the WAL mode a commit wakes the lanes of its rows' buckets only).
   */
  wakeups(buckets?: readonly number[]): number {
    if (buckets === undefined) return this.#wakeups;
    let n = this.#wakeupsAll;
    for (const b of buckets) {
      n += this.#bucketWakeups[b]!;
      this.#listed[b] = 1;
    }
    return n;
  }

  /** How the relay is woken now; in WAL mode, the slot and its lag (one query on pg_replication_slots). */
  async wakeStatus(): Promise<WakeStatus> {
    const none = { slot: null, slotLagBytes: null, slotConfirmedAgeSeconds: null };
    if (!this.#wal) return { mode: 'notify', ...none };
    const slot = this.#wal.slot;
    if (slot === undefined) return { mode: this.#wal.state === 'fallback' ? 'fallback' : 'starting', ...none };
    const [s] = await walSlots(this.#db, this.names, slot);
    return { mode: 'wal', slot, slotLagBytes: s ? s.lagBytes : null, slotConfirmedAgeSeconds: s ? s.lastReplySeconds : null };
  }

  /** The `txbox_relay_wal_slot_lag_bytes` and `txbox_relay_wal_slot_confirmed_age_seconds` gauges: null unless WAL mode is streaming. */
  async wakeSlotLag(): Promise<WakeSlotLag | null> {
    if (!this.#wal) return null;
    const status = await this.wakeStatus();
    return status.slotLagBytes === null ? null : { bytes: status.slotLagBytes, confirmedAgeSeconds: status.slotConfirmedAgeSeconds === null ? null : Math.max(0, status.slotConfirmedAgeSeconds) };
  }

  /** The bytes of WAL the slot retains past what the relay confirmed: null unless WAL mode is streaming. */
  async wakeSlotLagBytes(): Promise<number | null> {
    return (await this.wakeSlotLag())?.bytes ?? null;
  }

  /**
   * A wake-up: every waiter when `buckets` is null (NOTIFY carries no bucket), else
   * the waiters of those buckets. A bucket this relay leases that no lane has
   * listed since the leases changed (a lane waiting since before it took the
   * lease) wakes everyone; a listed bucket whose lane is busy wakes no one (the
   * lane sees the count when its claim returns); a bucket another relay leases
   * wakes no one here.
   */
  #notified(buckets: readonly number[] | null = null): void {
    this.#wakeups++;
    if (buckets === null) {
      this.#wakeupsAll++;
      for (const w of this.#waiters) w.done();
      return;
    }
    for (const b of buckets) this.#bucketWakeups[b]!++;
    for (const b of buckets) {
      if (this.#held !== null && this.#held[b] === 0) continue;
      let found = false;
      for (const w of this.#waiters) {
        if (w.buckets === null || w.buckets[b] === 1) {
          found = true;
          w.done();
        }
      }
      if (!found && this.#listed[b] === 0) {
        for (const w of this.#waiters) w.done();
        return;
      }
    }
  }

  #listen(): Promise<void> {
    this.#listening ??= this.#db
      .listen(this.names.channel, () => this.#notified())
      .then((unlisten) => {
        this.#unlisten = unlisten;
      });
    return this.#listening;
  }

  async waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number, buckets?: readonly number[]): Promise<void> {
    if (this.#wal) this.#wal.start();
    if (!this.#wal || this.#wal.state === 'fallback') {
      try {
        await this.#listen();
      } catch {
        this.#listening = undefined; // LISTEN unavailable now: fall back to polling, retry next time
      }
    }
    if (since !== undefined && this.wakeups(buckets) !== since) return;
    if (signal.aborted) return;
    let poll = true;
    if (this.#wal?.streaming && this.#takeRecheck(buckets)) {
      poll = false;
      // The walsender can decode a commit a moment before the committing backend
      // is visible to new snapshots: a claim right after the wake-up may miss its
      // rows. Look again once, 1 ms later, before waiting for the next one.
      timeoutMs = Math.min(timeoutMs, 1);
    }
    // WAL mode: a retry or deferral this relay recorded is not announced when it comes due, and a row
    // announced before it was visible is not announced again when it is: wake for both. Only while
    // streaming: only then do claims consult (and consume) these times; in fallback every claim is the
    // ordinary one and the poll finds what came due, as in the notify mode.
    if (this.#targets !== undefined && this.#wal?.streaming) {
      const now = performance.now();
      const look = buckets === undefined ? Number.POSITIVE_INFINITY : this.#targets.lookInMs(buckets, now);
      const due = Math.ceil(Math.min(this.#targets.dueInMs(now), look));
      if (due < timeoutMs) {
        timeoutMs = due;
        poll = false;
      }
    }
    let interest: Uint8Array | null = null;
    if (buckets !== undefined) {
      const cached = this.#interest.get(buckets);
      if (cached !== undefined && sameBuckets(cached.buckets, buckets, itself)) interest = cached.mask;
      else {
        interest = new Uint8Array(256);
        for (const b of buckets) interest[b] = 1;
        this.#interest.set(buckets, { buckets: [...buckets], mask: interest });
      }
      for (const b of buckets) this.#listed[b] = 1;
    }
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiters.delete(waiter);
        resolve();
      };
      const waiter: Waiter = { done, buckets: interest };
      const timer = setTimeout(() => {
        // A wait that ended by its timeout is the poll: the next claim is the ordinary one (WAL mode).
        // Not the 1 ms second look above, nor a wait cut short for a retry coming due (that sets its own).
        if (poll) {
          if (buckets !== undefined) this.#targets?.forget(buckets);
          else this.#targets?.forgetAll();
        }
        done();
      }, timeoutMs);
      signal.addEventListener('abort', done, { once: true });
      this.#waiters.add(waiter);
    });
  }

  /** Whether a WAL wake-up of these buckets (all: undefined) is still unanswered by rows; clears it. */
  #takeRecheck(buckets: readonly number[] | undefined): boolean {
    let any = false;
    for (const b of buckets ?? this.#recheck.keys()) {
      if (this.#recheck[b] === 1) {
        any = true;
        this.#recheck[b] = 0;
      }
    }
    return any;
  }

  async close(): Promise<void> {
    for (const w of this.#waiters) w.done();
    await this.#wal?.close();
    await this.#listening?.catch(() => {});
    await this.#unlisten?.();
    this.#unlisten = undefined;
    this.#listening = undefined;
  }
}

/**
 * The buckets of a batch whose every event was published, and the one token each was claimed
 * under, for completePublishedSql; undefined when an event failed, has no bucket, or a bucket
 * comes with two tokens (a mark of batches claimed under two leases of it): those are fenced
 * per event.
 */
function publishedByBucket(completions: readonly Completion[]): { buckets: number[]; tokens: string[] } | undefined {
  const tokenOf = new Map<number, string>();
  for (const c of completions) {
    if (c.outcome !== 'published' || c.bucket === undefined) return undefined;
    const token = tokenOf.get(c.bucket);
    if (token === undefined) tokenOf.set(c.bucket, c.token);
    else if (token !== c.token) return undefined;
  }
  return { buckets: [...tokenOf.keys()], tokens: [...tokenOf.values()] };
}
