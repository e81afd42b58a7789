-- txbox outbox, version 8: the WAL wake mode's claim of announced rows.
-- A relay in the WAL wake mode knows the seq of every row a commit inserted in
-- its buckets. When it has seen everything else in those buckets (its last
-- ordinary claim came back short and nothing happened since that could make
-- other rows claimable), it claims those rows by seq: a primary-key lookup
-- instead of the ordinary claim, which is planned on every call (about
-- 0.4 ms here) and was two thirds of the WAL mode's commit-to-publish median.
-- It returns a row only when the ordinary claim would also return it, and no
-- earlier row: no earlier open row of its key may exist except the announced
-- rows themselves (which it returns in order, or which block it). So a row
-- never overtakes an earlier pending or parked event of its key, whatever
-- made that one pending (an operator's retry, a release of held rows, a
-- backoff that ran out). What it does not return the relay's next ordinary
-- claim finds. Running this again changes nothing.

-- "Is there an earlier open row of this key?" The blocking index (migration
-- 005) lists only rows that block; this one lists every pending or parked row.
CREATE INDEX IF NOT EXISTS {{table:_open_key_idx}} ON {{schema}}.{{table}} (key, seq) WHERE state IN ('pending', 'parked');

-- PL/pgSQL keeps the plan for the session, and the SET clauses hold while it
-- is planned: primary-key (or claim-index) lookups by seq and the index above,
-- whatever size the table had when the plan was made (a generic plan made on
-- a small table stays in use as it grows: see migration 003).
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim_seqs}}(p_seqs bigint[], p_buckets smallint[], p_limit integer, p_skip text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $fn$
BEGIN
  RETURN QUERY
  SELECT o.* FROM {{schema}}.{{table}} o
  WHERE o.seq = ANY(p_seqs) AND o.state = 'pending' AND o.held_by IS NULL
    AND o.bucket = ANY(p_buckets)
    AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
    AND NOT EXISTS (
      SELECT 1 FROM {{schema}}.{{table}} p
      WHERE p.key = o.key AND p.seq < o.seq AND p.state IN ('pending', 'parked')
        AND (p.seq <> ALL(p_seqs)
          OR (p.state = 'pending' AND (p.next_attempt_at IS NOT NULL OR p.held_by IS NOT NULL))
          OR (p.state = 'parked' AND p.destination <> ALL(p_skip))))
  ORDER BY o.seq
  LIMIT p_limit;
END
$fn$;
