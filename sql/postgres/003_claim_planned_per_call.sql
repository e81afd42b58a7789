-- txbox outbox, version 3: the claim function planned on every call again.
-- Version 2 made it PL/pgSQL, which keeps the plan for the session. A plan
-- made while the table was small stayed in use as the table grew (no ANALYZE
-- in between: autovacuum off, or PGlite), and claims slowed from 5 ms to
-- 85 ms within 15 s in some relay runs (docs/performance.md, finding 8).
-- LANGUAGE sql with SET clauses is planned per call, against the table as it
-- is; this is version 1's function.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:_claim}}(p_buckets smallint[], p_limit integer, p_skip text[])
RETURNS SETOF {{schema}}.{{table}}
LANGUAGE sql STABLE
SET enable_sort = off
SET enable_bitmapscan = off
AS $fn$
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
  LIMIT p_limit
$fn$;
