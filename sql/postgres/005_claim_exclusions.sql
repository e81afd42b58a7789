-- txbox outbox, version 5: a claim that leaves out given events and keys.
-- A relay lane claims its next batch while the previous batch's marks are
-- still being written. Those events are still 'pending' until the marks
-- commit, so the claim leaves them out by seq (p_exclude_seqs), and leaves
-- out every key of that batch that is not done (p_exclude_keys: a failure or
-- an event not attempted), whose later events must wait for the mark. Same
-- query and plan pins as version 3 otherwise; the 3-argument function stays
-- for relays of the previous version during a rolling upgrade.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim}}(p_buckets smallint[], p_limit integer, p_skip text[], p_exclude_seqs bigint[], p_exclude_keys text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE sql STABLE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
  SELECT o.* FROM {{schema}}.{{table}} o
  WHERE o.state = 'pending'
    AND o.bucket = ANY(p_buckets)
    AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
    AND o.seq <> ALL(p_exclude_seqs)
    AND o.key <> ALL(p_exclude_keys)
    AND NOT EXISTS (
      SELECT 1 FROM {{schema}}.{{table}} p
      WHERE p.key = o.key AND p.seq < o.seq
        AND (p.state = 'parked' OR (p.state = 'pending' AND p.next_attempt_at IS NOT NULL))
        AND ((p.state = 'pending' AND p.next_attempt_at > now())
          OR (p.state = 'parked' AND p.destination <> ALL(p_skip))))
  ORDER BY o.seq
  LIMIT p_limit
$fn$;
