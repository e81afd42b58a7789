-- txbox outbox, version 2: the claim function in PL/pgSQL.
-- Same query and result as version 1. A LANGUAGE sql function with SET
-- clauses is planned again on every call; PL/pgSQL keeps the plan for the
-- session, which halves the cost of the small claims a relay runs at low and
-- steady rates (measured in docs/performance.md). The SET clauses still pin
-- the ordered scan, also for the cached generic plan.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim}}(p_buckets smallint[], p_limit integer, p_skip text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE plpgsql STABLE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
BEGIN
  RETURN QUERY
  SELECT o.* FROM {{schema}}.{{table}} o
  WHERE o.state = 'pending'
    AND o.bucket = ANY(p_buckets)
    AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
    AND NOT EXISTS (
      SELECT 1 FROM {{schema}}.{{table}} p
      WHERE p.key = o.key AND p.seq < o.seq
        AND (p.state = 'parked' OR (p.state = 'pending' AND p.next_attempt_at IS NOT NULL))
        AND ((p.state = 'pending' AND p.next_attempt_at > now())
          OR (p.state = 'parked' AND p.destination <> ALL(p_skip))))
  ORDER BY o.seq
  LIMIT p_limit;
END
$fn$;
