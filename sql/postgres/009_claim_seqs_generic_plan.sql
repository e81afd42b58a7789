-- txbox outbox, version 9: the claim by seq keeps one plan per session.
-- Migration 008 meant the claim of announced rows to keep its plan for the
-- session, but PL/pgSQL's plan cache chose a custom plan on every call (the
-- generic plan's estimate for "seq = ANY(p_seqs)" looked worse than the custom
-- ones): each claim planned its query again, about 0.4 ms of a 0.5 ms call on
-- this machine, against 0.1 ms with the generic plan. force_generic_plan, set
-- like the other settings while the function runs, makes the plan once per
-- session; enable_seqscan and enable_bitmapscan off keep it to index lookups
-- (by seq, then the open-key index) whatever size the table had when it was
-- made. Nothing else changes: same rows, same order.

CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim_seqs}}(p_seqs bigint[], p_buckets smallint[], p_limit integer, p_skip text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
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
