/**
 * The ports: small contracts between the core and its adapters (stores and
 * transports). Each method's doc says what it guarantees.
 */
import type { EventHeaders, OutboxEvent, StoredEvent } from './envelope.ts';
import type { TransportError } from './errors.ts';

/**
 * The executor seam: anything that runs one parameterized statement inside the
 * caller's transaction. `pg`'s Client and PoolClient and PGlite's transaction
 * object fit as they are; `fromKysely`, `fromKnex` and friends adapt the rest.
 * Placeholders are `$1, $2, ...`.
 */
export interface SqlExecutor {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** An event validated and serialized by the core, ready to insert. */
export interface PreparedEvent {
  readonly id: string;
  readonly type: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly key: string;
  readonly destination: string;
  /** The payload, already serialized to JSON text and checked against the size limit. */
  readonly payloadJson: string;
  readonly headers: EventHeaders;
  readonly occurredAt: Date;
  readonly version: number | null;
}

/**
 * Why a value passed to `enqueue` cannot take the events: `invalid`, it is
 * not a transaction of this store at all (InvalidEventError naming `tx`);
 * `autocommit`, it would write outside a transaction (NotInTransactionError,
 * unless the outbox allows autocommit).
 */
export type TransactionProblem = { readonly kind: 'invalid' | 'autocommit'; readonly message: string };

/**
 * The write side of an outbox table. `Tx` is the caller's transaction as the
 * store's database client gives it: `SqlExecutor` (`$n` placeholders) for
 * PostgreSQL and PGlite; another store names its own (a MySQL connection, a
 * Firestore transaction), so that `createOutbox` infers it and passing the
 * wrong client fails at compile time.
 */
export interface OutboxStore<Tx = SqlExecutor> {
  /**
   * Inserts the events with one statement through `tx`, inside whatever
   * transaction it is in. Never begins, commits or rolls back.
   * Events inserted by one call get increasing outbox order in array order.
   */
  insert(tx: Tx, events: readonly PreparedEvent[]): Promise<void>;
  /**
   * Optional: checks, without a round trip, what the caller passed as `tx`
   * (reading only what the driver exposes); undefined when it is usable or
   * the driver does not say. `enqueue` calls it before any validation or SQL.
   */
  checkTransaction?(tx: unknown): TransactionProblem | undefined;
}

/** A bucket lease held by one relay. `token` is the fencing token of this acquisition. */
export interface BucketLease {
  readonly bucket: number;
  readonly token: string;
}

/** What a relay reports about itself at each heartbeat (shown by `txbox status`). */
export interface RelayHeartbeat {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly inFlight: number;
  readonly publishedTotal: number;
  readonly ratePerMinute: number;
  /** Destinations whose circuit is open in this relay (a destination down). Default: none. */
  readonly circuits?: readonly OpenCircuit[];
}

/** A destination a relay has paused because it answered as down (401, 403, 404, refused, DNS). */
export interface OpenCircuit {
  readonly destination: string;
  /** The error that opened it (no payload). */
  readonly reason: string;
  /** When it opened (the first failure of this outage). */
  readonly openSince: Date;
  /** When the relay sends the next probe event. */
  readonly nextProbeAt: Date;
  /** Probes that failed since it opened. */
  readonly failedProbes: number;
}

/** The event a completion is about: its seq, the fencing token it was claimed under, and its bucket. */
export interface CompletedEvent {
  readonly seq: number;
  readonly token: string;
  /**
   * The event's bucket, as claimed. Optional: a store may use it to check the fence once per bucket
   * instead of once per event (the PostgreSQL store does, for a batch whose every event was published
   * under one token per bucket); without it the store checks each event.
   */
  readonly bucket?: number;
}

/** The outcome of one claimed event, reported back to the store. */
export type Completion = CompletedEvent &
  (
    | { readonly outcome: 'published' }
    | { readonly outcome: 'retry'; readonly delayMs: number; readonly error: string; readonly routesAcked?: readonly string[] }
    | { readonly outcome: 'park'; readonly error: string; readonly routesAcked?: readonly string[] }
    /** Not published because its destination is down: stays pending, not before `delayMs`, attempts unchanged. */
    | { readonly outcome: 'defer'; readonly delayMs: number; readonly error: string; readonly routesAcked?: readonly string[] }
  );

export interface ClaimOptions {
  /** At most this many events. */
  readonly limit: number;
  /** Destinations whose parked events do not hold back later events of their key. */
  readonly skipParkedDestinations: readonly string[];
}

/** The lag of a relay's replication slot (`RelayStore.wakeSlotLag`). */
export interface WakeSlotLag {
  readonly bytes: number;
  readonly confirmedAgeSeconds: number | null;
}

/**
 * The relay side of an outbox table. Buckets (hash slots of the key) are
 * leased to one relay at a time, judged by the database clock; every change a
 * relay makes is checked against its lease's fencing token.
 */
export interface RelayStore {
  /** Records that `relay` is alive and returns how many relays are alive now. */
  heartbeat(
    relay: RelayHeartbeat,
    ttlMs: number,
  ): Promise<{
    readonly liveRelays: number;
    readonly bucketCount: number;
    /** Ms until the first unexpired lease of another relay runs out, if any (lets a relay take a crashed relay's buckets as they expire). */
    readonly nextForeignExpiryMs?: number | null;
  }>;
  /**
   * Renews `held` leases and acquires up to `acquire` more free or expired buckets.
   * Returns every lease the relay holds afterwards; a held lease missing from the
   * result was lost (expired and taken by another relay).
   */
  lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number): Promise<BucketLease[]>;
  /** Gives buckets back at once, so that other relays need not wait for expiry. */
  release(relayId: string, leases: readonly BucketLease[]): Promise<void>;
  /**
   * Graceful stop: frees the buckets of `held` (fenced by token, as `release`:
   * a lease taken since by another process, the same relay id included, stays
   * its owner's) and marks the relay left, so the others rebalance at once.
   */
  leave(relayId: string, held: readonly BucketLease[]): Promise<void>;
  /**
   * Returns publishable events of the leased buckets in outbox order. An event is
   * publishable when it is pending, not backing off, and no earlier event of its
   * key is backing off or parked (unless that one's destination skips parked
   * events). Several events of one key may be returned, in order.
   */
  claim(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[]>;
  /**
   * Optional: a claim that is safe while this lane's previous batch is still
   * being marked (its rows are still pending in the store). A store that knows
   * which rows were committed since its last full claim over these buckets
   * (the PostgreSQL WAL wake mode's claims by seq) returns those it may
   * publish, never a row of the batch being marked and never one with an
   * earlier open row of its key; `null` when only `claim` can tell, after the
   * marks. A relay given this method starts its next claim without waiting
   * for the previous batch's mark; stores without it: leave it out.
   */
  claimWhileMarking?(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[] | null>;
  /**
   * Optional: readies `connections` connections for the claims and marks
   * (opens them and runs once what a connection's first claim or mark would
   * compile), so that a relay's first batches after start do not pay for it.
   * The relay calls it at start with its lane count, beside the transports'
   * start and the first lease tick. Best effort: resolves, never rejects.
   */
  warm?(connections: number): Promise<void>;
  /**
   * Applies outcomes in one statement, fenced (`routesAcked` of a failed
   * event are remembered so those routes are not sent it again): a row changes only if the relay
   * still holds its bucket with the same token and the lease has not expired.
   * Returns how many were applied; the rest were rejected by the fence.
   */
  complete(relayId: string, completions: readonly Completion[]): Promise<{ readonly applied: number; readonly rejected: number }>;
  /**
   * Resolves when new events may be waiting (a notification) or after
   * `timeoutMs`, whichever comes first, or at once when `signal` aborts.
   * `since`: the `wakeups()` count read before the claim that came back
   * empty; when a notification arrived after it, resolves at once, so a
   * commit that landed while the claim ran is not left waiting for the poll.
   * `buckets`: the buckets the caller claims from (a relay lane's leases); a
   * store that knows which buckets a notification concerns may wake only the
   * callers of those buckets (the PostgreSQL WAL wake mode does), and then
   * counts `since` over them too. Stores that do not: ignore it.
   */
  waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number, buckets?: readonly number[]): Promise<void>;
  /**
   * How many notifications this store has received so far (stores without
   * notifications: leave it out); with `buckets`, those that concern them (as
   * `waitForEvents` counts them).
   */
  wakeups?(buckets?: readonly number[]): number;
  /**
   * Optional: deletes up to `limit` published or skipped rows finished more
   * than `olderThanMs` ago (never pending or parked ones). Returns how many.
   */
  prune?(olderThanMs: number, limit: number): Promise<number>;
  /** Optional: how many events are pending and parked (all buckets), for the relay's periodic log summary. */
  backlog?(): Promise<{ readonly pending: number; readonly parked: number }>;
  /**
   * Optional: pending, parked and oldest pending age per destination, and the
   * relays alive, in one cheap statement, for the metrics gauges. The relay
   * caches it and calls it only when metrics are collected.
   */
  outboxGauges?(): Promise<OutboxGauges>;
  /**
   * Optional: in a log-based wake mode, the lag of this relay's slot: the
   * bytes of log it retains past what the relay confirmed, and the seconds
   * since the relay last confirmed (null when the server has no reply from it
   * yet); null when no slot streams now (notify mode, fallback, starting).
   * Read only when metrics are collected.
   */
  wakeSlotLag?(): Promise<WakeSlotLag | null>;
  /** Releases connections the store opened itself. */
  close(): Promise<void>;
}

/** What `RelayStore.outboxGauges` reads. */
export interface OutboxGauges {
  readonly destinations: readonly {
    readonly destination: string;
    readonly pending: number;
    readonly parked: number;
    /** Age of the oldest pending event in seconds, 0 with none pending. */
    readonly oldestPendingSeconds: number;
  }[];
  /** Relays whose heartbeat is current (by their lease TTL, on the database clock). */
  readonly relaysAlive: number;
}

/** The outcome of publishing one event. */
export type PublishOutcome = { readonly ok: true } | { readonly ok: false; readonly error: TransportError };

/**
 * Moves events to a broker or endpoint. Modelled on Watermill's Publisher.
 */
export interface Transport {
  /** A short name for logs and metrics, e.g. `http`, `kafka`. */
  readonly name: string;
  /** Connects and checks configuration; throws ConfigError naming the setting. Optional. */
  start?(signal: AbortSignal): Promise<void>;
  /**
   * Publishes events and resolves with one outcome per event, in input order,
   * only after the broker acknowledged each (ack before mark). The relay passes
   * at most one event per key in a call, so events of a call may be sent
   * concurrently. Per-event failures are outcomes; the promise rejects only on
   * a programming error. Publishing the same id twice is allowed (at-least-once).
   * `signal` aborts at the relay's publish timeout, at the local deadline of
   * the events' bucket leases, or when the relay stops now: from then on start
   * no further send, and abort sends in flight where the client allows it
   * (another relay may own those keys by now).
   * Send `payloadText(event)`: the payload's stored JSON text when the event
   * has it, rather than serializing `event.payload` again.
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]>;
  /** Closes connections; in-flight publishes are finished or aborted first. */
  close(): Promise<void>;
}
