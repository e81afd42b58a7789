/**
 * Every SQL statement of the PostgreSQL backend (also used by PGlite), one
 * function each, as reviewable text. Names are validated and quoted by
 * `postgresNames` before they reach any statement.
 */
import { checkIdentifier, MAX_TABLE_NAME_LENGTH, quoteIdent } from '../../core/identifiers.ts';

export interface PostgresNamesOptions {
  /** Schema of the outbox tables. Default: `txbox`. */
  readonly schema?: string;
  /** Name of the outbox table; companion tables get it as a prefix. Default: `outbox`. */
  readonly table?: string;
}

export interface PostgresNames {
  readonly schema: string;
  readonly table: string;
  /** Quoted, schema-qualified names. */
  readonly outbox: string;
  readonly buckets: string;
  readonly relays: string;
  readonly audit: string;
  readonly migrations: string;
  readonly fenceSeq: string;
  readonly claimFn: string;
  /** Claims announced rows by seq (migration 008, the WAL wake mode). */
  readonly claimSeqsFn: string;
  /** The mark of a small batch, planned once per session (migration 010). */
  readonly completeFn: string;
  /** Holds the rows queued behind new blockers (migration 005). */
  readonly holdFn: string;
  /** Releases rows held by rows that no longer block (migration 005). */
  readonly releaseHeldFn: string;
  /** The LISTEN/NOTIFY channel. */
  readonly channel: string;
  /** Suffixed, quoted table name for migration templates. */
  suffixed(suffix: string): string;
}

export function postgresNames(options: PostgresNamesOptions = {}, field = ''): PostgresNames {
  const schema = checkIdentifier(`${field}schema`, options.schema ?? 'txbox');
  const table = checkIdentifier(`${field}table`, options.table ?? 'outbox', MAX_TABLE_NAME_LENGTH);
  const q = (suffix: string): string => `${quoteIdent(schema)}.${quoteIdent(table + suffix)}`;
  const long = `txbox_${schema}_${table}`;
  return Object.freeze({
    schema,
    table,
    outbox: q(''),
    buckets: q('_buckets'),
    relays: q('_relays'),
    audit: q('_audit'),
    migrations: q('_migrations'),
    fenceSeq: q('_fence_seq'),
    claimFn: q('_claim'),
    claimSeqsFn: q('_claim_seqs'),
    completeFn: q('_complete'),
    holdFn: q('_hold'),
    releaseHeldFn: q('_release_held'),
    channel: long.length <= 63 ? long : `txbox_${table}`,
    suffixed: (suffix: string) => quoteIdent(checkIdentifier('migration suffix', table + suffix)),
  });
}

/** The payload as text: the relay hands it to transports as it is (see `OutboxEvent.payloadJson`). */
// occurred_at as whole epoch milliseconds (what a Date holds; pg's timestamp parser, a regular expression and
// date arithmetic per row, was about 5% of a relay's own CPU when draining): floor, as that parser truncates the microseconds.
const EVENT_COLUMNS = `o.seq, o.id, o.type, o.aggregate_type, o.aggregate_id, o.key, o.bucket, o.destination,
  o.payload::text AS payload, o.headers, floor(extract(epoch FROM o.occurred_at) * 1000)::float8 AS occurred_ms, o.version, o.attempts, o.routes_done,
  (extract(epoch FROM o.created_at) * 1000)::float8 AS created_ms`;

export { EVENT_COLUMNS };

const INSERT_COLUMNS = 'id, type, aggregate_type, aggregate_id, key, destination, payload, headers, occurred_at, version';

/**
 * The insert of one enqueue call. `single`: one event as ten parameters
 * ($1 id ... $10 version) in a plain VALUES row, the cheapest shape for the
 * common one-event transaction; otherwise $1 is a JSON array of events
 * whose keys are the column names, inserted in array order.
 * `json_to_recordset` parses each element once (a `json` column, `payload`,
 * gets its text exactly as written); extracting fields with `->>` parsed the
 * element again for every field. With `notify`, one notification per statement
 * (PostgreSQL deduplicates it per transaction).
 */
export function insertEventsSql(n: PostgresNames, notify: boolean, ignoreDuplicates = false, single = false): string {
  const source = single
    ? `VALUES ($1::uuid, $2, $3, $4, $5, $6, $7::json, $8::jsonb, $9::timestamptz, $10::bigint)`
    : `SELECT ${INSERT_COLUMNS}
  FROM ROWS FROM (json_to_recordset($1::json) AS (id uuid, type text, aggregate_type text, aggregate_id text, key text,
    destination text, payload json, headers jsonb, occurred_at timestamptz, version bigint)) WITH ORDINALITY AS x(${INSERT_COLUMNS}, n)
  ORDER BY n`;
  const insert = `INSERT INTO ${n.outbox} (${INSERT_COLUMNS})
  ${source}${ignoreDuplicates ? '\n  ON CONFLICT (id) WHERE replay_id IS NULL DO NOTHING' : ''}`;
  if (!notify) return insert;
  return `WITH ins AS (${insert} RETURNING 1)
, notified AS (SELECT pg_notify('${n.channel}', '') FROM (SELECT 1 FROM ins LIMIT 1) AS any_row)
SELECT (SELECT count(*) FROM notified)::int AS notified`;
}

/**
 * $1 relay id, $2 host, $3 pid, $4 in flight, $5 published total, $6 rate, $7 ttl ms, $8 open circuits (JSON array).
 * A heartbeat makes a relay that had left alive again (same relay id), and
 * deletes rows of relays that left or stopped heartbeating over 24 hours ago.
 * Also returns when the first lease of another relay runs out (bucket leases are few: 256 rows).
 */
export function heartbeatSql(n: PostgresNames): string {
  return `WITH up AS (
  INSERT INTO ${n.relays} AS r (relay_id, host, pid, in_flight, published_total, rate_per_minute, lease_ttl_ms, circuits)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
  ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), in_flight = EXCLUDED.in_flight,
    published_total = EXCLUDED.published_total, rate_per_minute = EXCLUDED.rate_per_minute,
    host = EXCLUDED.host, pid = EXCLUDED.pid, lease_ttl_ms = EXCLUDED.lease_ttl_ms, left_at = NULL, circuits = EXCLUDED.circuits
  RETURNING 1
), gone AS (
  DELETE FROM ${n.relays} WHERE coalesce(left_at, heartbeat_at) < now() - interval '24 hours'
)
SELECT 1 + (SELECT count(*) FROM ${n.relays}
            WHERE relay_id <> $1 AND left_at IS NULL AND heartbeat_at > now() - $7 * interval '1 millisecond')::int AS live,
       (SELECT count(*) FROM ${n.buckets})::int AS bucket_count,
       (SELECT ceil(extract(epoch FROM min(lease_until) - now()) * 1000) FROM ${n.buckets}
        WHERE lease_until > now() AND owner IS DISTINCT FROM $1)::float8 AS next_foreign_expiry_ms,
       (SELECT count(*) FROM up)::int AS up`;
}

/**
 * The buckets of `$1`'s live leases among the (bucket, token) pairs given by the
 * parameters `buckets` and `tokens`, locked (`FOR lock`) in bucket order, as
 * every statement that locks lease rows does, so that none can deadlock another.
 */
function liveLeases(n: PostgresNames, buckets: string, tokens: string, lock: 'UPDATE' | 'SHARE'): string {
  return `SELECT b.bucket FROM ${n.buckets} b
  JOIN unnest(${buckets}::smallint[], ${tokens}::bigint[]) AS h(bucket, token) ON b.bucket = h.bucket AND b.token = h.token
  WHERE b.owner = $1 AND b.lease_until > now()
  ORDER BY b.bucket
  FOR ${lock} OF b`;
}

/**
 * The statement that marks published rows (`from`: a USING/FROM clause or '', `where`: which rows): deleted
 * with `deleteOnPublish`, else set published; returns each row's seq and whether it was a blocker (see completeSql).
 */
function markPublished(n: PostgresNames, deleteOnPublish: boolean, from: string, where: string): string {
  return deleteOnPublish
    ? `DELETE FROM ${n.outbox} o${from === '' ? '' : ` USING ${from}`}
  WHERE ${where}
  RETURNING o.seq, o.next_attempt_at IS NOT NULL AS blocker`
    : `UPDATE ${n.outbox} o SET state = 'published', done_at = now(), attempts = o.attempts + 1, next_attempt_at = NULL${from === '' ? '' : `
  FROM ${from}`}
  WHERE ${where}
  RETURNING o.seq, (o.attempts > 1 OR o.last_error IS NOT NULL) AS blocker`;
}

/** $1 relay id, $2 held buckets, $3 held tokens, $4 ttl ms, $5 how many to acquire. */
export function leaseSql(n: PostgresNames): string {
  // Rows are locked in bucket order, as the complete statement's fence does,
  // so that a lease renewal and a concurrent complete cannot deadlock.
  return `WITH held AS (
  ${liveLeases(n, '$2', '$3', 'UPDATE')}
), renewed AS (
  UPDATE ${n.buckets} b SET lease_until = now() + $4 * interval '1 millisecond'
  FROM held WHERE b.bucket = held.bucket
  RETURNING b.bucket, b.token
), candidates AS (
  SELECT bucket FROM ${n.buckets}
  WHERE lease_until IS NULL OR lease_until <= now()
  ORDER BY random()
  LIMIT $5
  FOR UPDATE SKIP LOCKED
), acquired AS (
  UPDATE ${n.buckets} b SET owner = $1, token = nextval('${n.fenceSeq}'),
    lease_until = now() + $4 * interval '1 millisecond'
  FROM candidates c WHERE b.bucket = c.bucket
  RETURNING b.bucket, b.token
)
SELECT bucket, token::text AS token FROM renewed
UNION ALL
SELECT bucket, token::text AS token FROM acquired`;
}

/** $1 relay id, $2 buckets, $3 tokens. */
export function releaseSql(n: PostgresNames): string {
  return `UPDATE ${n.buckets} b SET owner = NULL, lease_until = NULL
FROM unnest($2::smallint[], $3::bigint[]) AS h(bucket, token)
WHERE b.bucket = h.bucket AND b.token = h.token AND b.owner = $1`;
}

/**
 * $1 relay id, $2 buckets, $3 their tokens: the leases it holds, freed fenced by token (a lease taken since,
 * by the same relay id in another process included, stays). The row stays, marked left (for `txbox status`),
 * until the heartbeat's cleanup removes it after 24 hours.
 */
export function leaveSql(n: PostgresNames): string {
  return `WITH freed AS (
  UPDATE ${n.buckets} b SET owner = NULL, lease_until = NULL
  FROM unnest($2::smallint[], $3::bigint[]) AS h(bucket, token)
  WHERE b.bucket = h.bucket AND b.token = h.token AND b.owner = $1 RETURNING 1
)
UPDATE ${n.relays} SET left_at = now(), in_flight = 0, rate_per_minute = 0 WHERE relay_id = $1`;
}

/**
 * $1 buckets, $2 limit, $3 destinations whose parked events do not block.
 * The query lives in the `<table>_claim` function of the migration (see there why).
 */
export function claimSql(n: PostgresNames): string {
  return `SELECT ${EVENT_COLUMNS} FROM ${n.claimFn}($1::smallint[], $2::integer, $3::text[]) o`;
}

/**
 * $1 seqs announced by the WAL stream, $2 buckets, $3 limit, $4 destinations
 * whose parked events do not block: the rows of $1 the ordinary claim would
 * return, and only while no earlier open row of their key is left out
 * (migration 008).
 */
export function claimSeqsSql(n: PostgresNames): string {
  return `SELECT ${EVENT_COLUMNS} FROM ${n.claimSeqsFn}($1::bigint[], $2::smallint[], $3::integer, $4::text[]) o`;
}

/**
 * $1 relay id, $2 seqs, $3 tokens, $4 outcomes (0 published, 1 retry, 2 park,
 * 3 defer: destination down, pending again after the delay without counting an attempt),
 * $5 retry delays ms, $6 errors, $7 routes acked (comma-joined). Fenced: applies only rows whose bucket the
 * relay still holds under the same token, with the lease unexpired by the
 * database clock; the lease rows are share-locked so that no other relay can
 * take them over while this statement runs.
 */
/**
 * A row passes the fence when (its bucket, the claim's token) is one of the
 * relay's live leases. Checked with = ANY over (bucket << 48 | token) pairs
 * computed once: a join with the fence rows ran as a nested loop over every
 * (event, bucket) pair, as the planner estimates the fence at one row
 * (measured 2x slower per batch). Tokens stay far below 2^48.
 */
const FENCED = `((o.bucket::bigint << 48) | i.token) = ANY ((SELECT pairs FROM fenced)::bigint[])`;

/**
 * `synchronousCommit: false` (the default of the relay store) commits the
 * statement without waiting for its WAL flush: `set_config(..., true)` sets
 * synchronous_commit for this statement's own transaction only. A database
 * crash can then undo the marks of its last moments (at most three times
 * wal_writer_delay, 600 ms by default), and those events are published again:
 * at-least-once, as after a relay crash. Never skipped or reordered: WAL is
 * replayed in order, so what survives is a prefix of the marks, and a later
 * synchronous commit (a producer's, a lease) flushes every earlier mark.
 */
export function completeSql(n: PostgresNames, deleteOnPublish: boolean, synchronousCommit = true): string {
  // `blocker`: the row was backing off or deferred, so rows may be held behind it (migration 005):
  // it failed before (attempts >= 1 before this publish), or its destination was down (deferred:
  // attempts unchanged, last_error set, which publishing leaves as it was). RETURNING sees the row
  // after the UPDATE, where next_attempt_at is already NULL.
  const published = markPublished(n, deleteOnPublish, 'input i', `i.outcome = 0 AND o.seq = i.seq AND o.state = 'pending' AND ${FENCED}`);
  return `WITH input AS (
  SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::smallint[], $5::integer[], $6::text[], $7::text[])
    AS i(seq, token, outcome, delay_ms, error, routes)
), fence AS (
  SELECT b.bucket, b.token FROM ${n.buckets} b
  WHERE b.owner = $1 AND b.lease_until > now() AND b.token = ANY($3::bigint[])
  ORDER BY b.bucket
  FOR SHARE
), fenced AS (
  SELECT ARRAY(SELECT (f.bucket::bigint << 48) | f.token FROM fence f) AS pairs
), published AS (
  ${published}
), failed AS (
  UPDATE ${n.outbox} o SET
    state = CASE WHEN i.outcome = 2 THEN 'parked' ELSE 'pending' END,
    attempts = o.attempts + CASE WHEN i.outcome = 3 THEN 0 ELSE 1 END,
    last_error = i.error,
    next_attempt_at = CASE WHEN i.outcome IN (1, 3) THEN now() + i.delay_ms * interval '1 millisecond' END,
    parked_at = CASE WHEN i.outcome = 2 THEN now() ELSE o.parked_at END,
    routes_done = CASE WHEN i.routes = '' THEN o.routes_done
      ELSE ARRAY(SELECT DISTINCT r FROM unnest(o.routes_done || string_to_array(i.routes, ',')) AS r ORDER BY r) END
  FROM input i
  WHERE i.outcome <> 0 AND o.seq = i.seq AND o.state = 'pending' AND ${FENCED}
  RETURNING 1
), released AS (
  ${releaseHeldBy(n, `ARRAY(SELECT seq FROM published WHERE blocker)`, `AND h.seq <> ALL($2::bigint[])`)}
)
SELECT (SELECT count(*) FROM published)::int + (SELECT count(*) FROM failed)::int AS applied,
  (SELECT count(*) FROM released)::int AS released${synchronousCommit ? '' : `,
  set_config('synchronous_commit', 'off', true) AS async_commit`}`;
}

/**
 * completeSql's statement for a batch whose every event was published, with
 * the fence checked once per bucket instead of once per row: $1 relay id,
 * $2 seqs, $3 the batch's buckets, $4 the token each was claimed under (one
 * per bucket: the caller falls back to completeSql when a bucket has two).
 * Marks the same rows as completeSql with every outcome 0 (a row of a bucket
 * whose lease is gone, expired or under another token is left as it is) and
 * answers alike. Faster for a large batch: the rows are found by one index
 * scan of their seqs, and the fence is an array of the live buckets indexed by
 * bucket, instead of a join of each unnested row with the lease pairs
 * (bench/complete-statement.ts: about a quarter less time for 500 rows).
 */
export function completePublishedSql(n: PostgresNames, deleteOnPublish: boolean, synchronousCommit = true): string {
  // live[bucket + 1] is true for the batch's buckets whose lease this relay still holds under the batch's token;
  // NULL (not marked) past the array's end and for the others.
  const fenced = `((SELECT live FROM lived)::boolean[])[o.bucket + 1]`;
  const published = markPublished(n, deleteOnPublish, '', `o.seq = ANY($2::bigint[]) AND o.state = 'pending' AND ${fenced}`);
  return `WITH fence AS (
  ${liveLeases(n, '$3', '$4', 'SHARE')}
), lived AS (
  SELECT ARRAY(
    SELECT f.bucket IS NOT NULL FROM generate_series(0, (SELECT coalesce(max(bucket), -1) FROM fence)) g(bucket)
    LEFT JOIN fence f ON f.bucket = g.bucket ORDER BY g.bucket) AS live
), published AS (
  ${published}
), released AS (
  ${releaseHeldBy(n, `ARRAY(SELECT seq FROM published WHERE blocker)`, `AND h.seq <> ALL($2::bigint[])`)}
)
SELECT (SELECT count(*) FROM published)::int AS applied,
  (SELECT count(*) FROM released)::int AS released${synchronousCommit ? '' : `,
  set_config('synchronous_commit', 'off', true) AS async_commit`}`;
}

/**
 * completeSql's statement through the function of migration 010, which keeps
 * its plan for the session: the same parameters, the same result.
 */
export function completeFnSql(n: PostgresNames, deleteOnPublish: boolean, synchronousCommit = true): string {
  return `SELECT o_applied AS applied, o_released AS released
  FROM ${n.completeFn}($1::text, $2::bigint[], $3::bigint[], $4::smallint[], $5::integer[], $6::text[], $7::text[], ${deleteOnPublish}, ${!synchronousCommit})`;
}

/**
 * The UPDATE that releases the pending rows held behind `blockers` (a bigint[]
 * expression), for the statements that end a blocker: publish, and the CLI's
 * parked retry, skip and discard. It runs in the statement that ends the
 * blocker, so a crash cannot leave one without the other. Empty and cheap
 * when nothing is held (a partial index of held rows only).
 */
export function releaseHeldBy(n: PostgresNames, blockers: string, and = ''): string {
  return `UPDATE ${n.outbox} h SET held_by = NULL
  WHERE h.held_by = ANY(${blockers}) AND h.state = 'pending' ${and}
  RETURNING 1`;
}

/**
 * $1 seqs that just backed off or parked, $2 destinations whose parked events do not block.
 * Holds the rows queued behind them; runs after the complete statement, on its own.
 */
export function holdSql(n: PostgresNames): string {
  return `SELECT ${n.holdFn}($1::bigint[], $2::text[]) AS held`;
}

/** $1 destinations whose parked events do not block. Releases rows held by rows that no longer block. */
export function releaseHeldSql(n: PostgresNames): string {
  return `SELECT ${n.releaseHeldFn}($1::text[]) AS released`;
}
