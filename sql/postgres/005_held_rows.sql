-- txbox outbox, version 5: events queued behind a blocked event leave the claim's index.
-- An event is publishable only when no earlier event of its key is backing off
-- or parked (docs/guarantees.md). The claim walked the open rows in seq order
-- and probed each for such a blocker, so every event queued behind one was
-- visited on every claim: 300,000 pending events behind 1,000 backing-off
-- heads made each claim take 5.2 s (docs/performance.md, "The claim during an
-- outage").
--
-- held_by marks a pending event as queued behind the blocker with that seq.
-- The relay sets it right after the complete statement that makes the
-- blocker back off or park (the <table>_hold function); every statement that
-- ends a blocker (publish, the CLI's parked retry/skip/discard) clears it in
-- the same statement. The claim scans only pending rows with held_by IS NULL, and
-- still checks every row it returns against the blockers exactly as before:
-- held_by only decides which rows the claim visits, never whether one is
-- publishable. A wrong NULL costs a visit; a held_by whose blocker has gone
-- (a statement of an older txbox, or one that ended while <table>_hold ran)
-- is cleared by <table>_release_held.
ALTER TABLE {{schema}}.{{table}} ADD COLUMN IF NOT EXISTS held_by bigint;

-- The claim scan: pending, not held, in outbox order. Replaces the scan of
-- all open rows, which also walked every parked row.
CREATE INDEX IF NOT EXISTS {{table:_claim_idx}} ON {{schema}}.{{table}} (seq) WHERE state = 'pending' AND held_by IS NULL;
DROP INDEX IF EXISTS {{schema}}.{{table:_open_seq_idx}};
-- `txbox parked list`: parked rows in outbox order.
CREATE INDEX IF NOT EXISTS {{table:_parked_seq_idx}} ON {{schema}}.{{table}} (seq) WHERE state = 'parked';
-- "Is an earlier event of this key blocked?" probes now also find held rows:
-- a row behind a held one must not overtake it.
DROP INDEX IF EXISTS {{schema}}.{{table:_blocked_key_idx}};
CREATE INDEX IF NOT EXISTS {{table:_blocking_key_idx}} ON {{schema}}.{{table}} (key, seq)
  WHERE state = 'parked' OR (state = 'pending' AND (next_attempt_at IS NOT NULL OR held_by IS NOT NULL));
-- Clearing: the rows held by given blockers. Empty unless something is blocked.
CREATE INDEX IF NOT EXISTS {{table:_held_by_idx}} ON {{schema}}.{{table}} (held_by) WHERE held_by IS NOT NULL;

-- Rows already queued behind a blocker when this migration runs (a rolling
-- upgrade during an outage): held by the first blocker of their key.
UPDATE {{schema}}.{{table}} h SET held_by = b.seq
FROM (
  SELECT DISTINCT ON (key) key, seq FROM {{schema}}.{{table}}
  WHERE state = 'parked' OR (state = 'pending' AND next_attempt_at IS NOT NULL)
  ORDER BY key, seq
) b
WHERE h.key = b.key AND h.seq > b.seq AND h.state = 'pending' AND h.held_by IS NULL;

-- The claim: version 3's query on the rows that are not held, where a held
-- row also blocks the rows behind it (they were not held yet: enqueued after
-- the hold) until it is released.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim}}(p_buckets smallint[], p_limit integer, p_skip text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE sql STABLE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
  SELECT o.* FROM {{schema}}.{{table}} o
  WHERE o.state = 'pending' AND o.held_by IS NULL
    AND o.bucket = ANY(p_buckets)
    AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
    AND NOT EXISTS (
      SELECT 1 FROM {{schema}}.{{table}} p
      WHERE p.key = o.key AND p.seq < o.seq
        AND (p.state = 'parked' OR (p.state = 'pending' AND (p.next_attempt_at IS NOT NULL OR p.held_by IS NOT NULL)))
        AND ((p.state = 'pending' AND p.next_attempt_at > now())
          OR (p.state = 'pending' AND p.held_by IS NOT NULL)
          OR (p.state = 'parked' AND p.destination <> ALL(p_skip))))
  ORDER BY o.seq
  LIMIT p_limit
$fn$;

-- Holds the pending rows queued behind the given rows, for those of them that
-- now block their key: backing off, or parked for a destination not in
-- p_skip (a relay that skips a destination's parked events must not hold the
-- rows behind them). Runs after the complete statement that made them block,
-- in a statement of its own: at the start of an outage it can update many
-- rows, and the complete statement's share locks on the lease rows must not
-- wait for it. A blocker that ends while it runs leaves its rows held until
-- <table>_release_held. One pass over the rows that are not held yet, from
-- the lowest blocker on: a hash join, never a probe per blocker.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_hold}}(p_seqs bigint[], p_skip text[])
RETURNS integer
LANGUAGE sql VOLATILE
SET enable_seqscan = off
SET enable_nestloop = off
AS $fn$
  WITH blockers AS (
    SELECT DISTINCT ON (p.key) p.key, p.seq FROM {{schema}}.{{table}} p
    WHERE p.seq = ANY(p_seqs)
      AND ((p.state = 'pending' AND p.next_attempt_at IS NOT NULL)
        OR (p.state = 'parked' AND p.destination <> ALL(p_skip)))
    ORDER BY p.key, p.seq
  ), held AS (
    UPDATE {{schema}}.{{table}} h SET held_by = b.seq
    FROM blockers b
    WHERE h.key = b.key AND h.seq > b.seq AND h.state = 'pending' AND h.held_by IS NULL
      AND h.seq > (SELECT min(seq) FROM blockers)
    RETURNING 1
  )
  SELECT count(*)::int FROM held
$fn$;

-- Releases rows held by a row that no longer blocks their key (ended by a
-- statement that does not clear held_by: an older txbox during a rolling
-- upgrade, or a hand-written UPDATE), and rows held by a parked event of a
-- destination in p_skip. Walks the distinct held_by values through their
-- index (one probe per blocker, not per held row). Releasing is always safe:
-- the claim checks every row it visits.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_release_held}}(p_skip text[])
RETURNS integer
LANGUAGE sql VOLATILE
AS $fn$
  WITH RECURSIVE blockers(seq) AS (
    (SELECT held_by FROM {{schema}}.{{table}} WHERE held_by IS NOT NULL ORDER BY held_by LIMIT 1)
    UNION ALL
    SELECT (SELECT h.held_by FROM {{schema}}.{{table}} h WHERE h.held_by > b.seq ORDER BY h.held_by LIMIT 1)
    FROM blockers b WHERE b.seq IS NOT NULL
  ), gone AS (
    SELECT b.seq FROM blockers b
    WHERE b.seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM {{schema}}.{{table}} p
      WHERE p.seq = b.seq
        AND ((p.state = 'pending' AND p.next_attempt_at IS NOT NULL)
          OR (p.state = 'parked' AND p.destination <> ALL(p_skip))))
  ), released AS (
    UPDATE {{schema}}.{{table}} h SET held_by = NULL
    WHERE h.held_by = ANY(ARRAY(SELECT seq FROM gone))
    RETURNING 1
  )
  SELECT count(*)::int FROM released
$fn$;
