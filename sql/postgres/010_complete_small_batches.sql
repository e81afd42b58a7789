-- txbox outbox, version 10: the mark of a small batch keeps one plan per session.
-- The relay's mark (the fenced statement that records a batch published,
-- retried or parked) is planned on every call, as a generic plan made on a
-- small table can go bad as the table grows (docs/performance-notes.md,
-- finding 7). For a batch of a few events, parsing and planning that
-- statement took longer than running it: 1.3-1.4 ms a call for one event
-- on this machine, 0.9-1.0 ms through this function (bench/complete-statement.ts). This
-- function is the same statement (test/unit/postgres-complete-fn.test.ts
-- keeps the two texts equal), planned once per session with
-- force_generic_plan; enable_seqscan and enable_bitmapscan off keep the plan
-- to index lookups (the outbox by seq, the held rows by held_by, the bucket
-- rows by bucket) whatever size the table had when it was made. The relay
-- calls it for small batches (PostgresRelayStore: at most 64 events); full
-- batches keep the statement planned per call. p_async: synchronous_commit
-- off for the calling transaction (the relay store's asynchronous marks).

CREATE OR REPLACE FUNCTION {{schema}}.{{table:_complete}}(p_relay text, p_seqs bigint[], p_tokens bigint[], p_outcomes smallint[],
  p_delays integer[], p_errors text[], p_routes text[], p_delete boolean, p_async boolean)
RETURNS TABLE (o_applied integer, o_released integer)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
  IF p_async THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF p_delete THEN
    RETURN QUERY
    WITH input AS (
      SELECT * FROM unnest(p_seqs::bigint[], p_tokens::bigint[], p_outcomes::smallint[], p_delays::integer[], p_errors::text[], p_routes::text[])
        AS i(seq, token, outcome, delay_ms, error, routes)
    ), fence AS (
      SELECT b.bucket, b.token FROM {{schema}}.{{table:_buckets}} b
      WHERE b.owner = p_relay AND b.lease_until > now() AND b.token = ANY(p_tokens::bigint[])
      ORDER BY b.bucket
      FOR SHARE
    ), fenced AS (
      SELECT ARRAY(SELECT (f.bucket::bigint << 48) | f.token FROM fence f) AS pairs
    ), published AS (
      DELETE FROM {{schema}}.{{table}} o USING input i
      WHERE i.outcome = 0 AND o.seq = i.seq AND o.state = 'pending' AND ((o.bucket::bigint << 48) | i.token) = ANY ((SELECT pairs FROM fenced)::bigint[])
      RETURNING o.seq, o.next_attempt_at IS NOT NULL AS blocker
    ), failed AS (
      UPDATE {{schema}}.{{table}} o SET
        state = CASE WHEN i.outcome = 2 THEN 'parked' ELSE 'pending' END,
        attempts = o.attempts + CASE WHEN i.outcome = 3 THEN 0 ELSE 1 END,
        last_error = i.error,
        next_attempt_at = CASE WHEN i.outcome IN (1, 3) THEN now() + i.delay_ms * interval '1 millisecond' END,
        parked_at = CASE WHEN i.outcome = 2 THEN now() ELSE o.parked_at END,
        routes_done = CASE WHEN i.routes = '' THEN o.routes_done
          ELSE ARRAY(SELECT DISTINCT r FROM unnest(o.routes_done || string_to_array(i.routes, ',')) AS r ORDER BY r) END
      FROM input i
      WHERE i.outcome <> 0 AND o.seq = i.seq AND o.state = 'pending' AND ((o.bucket::bigint << 48) | i.token) = ANY ((SELECT pairs FROM fenced)::bigint[])
      RETURNING 1
    ), released AS (
      UPDATE {{schema}}.{{table}} h SET held_by = NULL
      WHERE h.held_by = ANY(ARRAY(SELECT seq FROM published WHERE blocker)) AND h.state = 'pending' AND h.seq <> ALL(p_seqs::bigint[])
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM published)::int + (SELECT count(*) FROM failed)::int AS applied,
      (SELECT count(*) FROM released)::int AS released;
  ELSE
    RETURN QUERY
    WITH input AS (
      SELECT * FROM unnest(p_seqs::bigint[], p_tokens::bigint[], p_outcomes::smallint[], p_delays::integer[], p_errors::text[], p_routes::text[])
        AS i(seq, token, outcome, delay_ms, error, routes)
    ), fence AS (
      SELECT b.bucket, b.token FROM {{schema}}.{{table:_buckets}} b
      WHERE b.owner = p_relay AND b.lease_until > now() AND b.token = ANY(p_tokens::bigint[])
      ORDER BY b.bucket
      FOR SHARE
    ), fenced AS (
      SELECT ARRAY(SELECT (f.bucket::bigint << 48) | f.token FROM fence f) AS pairs
    ), published AS (
      UPDATE {{schema}}.{{table}} o SET state = 'published', done_at = now(), attempts = o.attempts + 1, next_attempt_at = NULL
      FROM input i
      WHERE i.outcome = 0 AND o.seq = i.seq AND o.state = 'pending' AND ((o.bucket::bigint << 48) | i.token) = ANY ((SELECT pairs FROM fenced)::bigint[])
      RETURNING o.seq, (o.attempts > 1 OR o.last_error IS NOT NULL) AS blocker
    ), failed AS (
      UPDATE {{schema}}.{{table}} o SET
        state = CASE WHEN i.outcome = 2 THEN 'parked' ELSE 'pending' END,
        attempts = o.attempts + CASE WHEN i.outcome = 3 THEN 0 ELSE 1 END,
        last_error = i.error,
        next_attempt_at = CASE WHEN i.outcome IN (1, 3) THEN now() + i.delay_ms * interval '1 millisecond' END,
        parked_at = CASE WHEN i.outcome = 2 THEN now() ELSE o.parked_at END,
        routes_done = CASE WHEN i.routes = '' THEN o.routes_done
          ELSE ARRAY(SELECT DISTINCT r FROM unnest(o.routes_done || string_to_array(i.routes, ',')) AS r ORDER BY r) END
      FROM input i
      WHERE i.outcome <> 0 AND o.seq = i.seq AND o.state = 'pending' AND ((o.bucket::bigint << 48) | i.token) = ANY ((SELECT pairs FROM fenced)::bigint[])
      RETURNING 1
    ), released AS (
      UPDATE {{schema}}.{{table}} h SET held_by = NULL
      WHERE h.held_by = ANY(ARRAY(SELECT seq FROM published WHERE blocker)) AND h.state = 'pending' AND h.seq <> ALL(p_seqs::bigint[])
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM published)::int + (SELECT count(*) FROM failed)::int AS applied,
      (SELECT count(*) FROM released)::int AS released;
  END IF;
END
$fn$;
