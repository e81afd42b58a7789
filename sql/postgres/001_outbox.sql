-- txbox outbox, version 1.
-- Placeholders: {{schema}} and {{table}} are replaced by validated, quoted
-- identifiers; {{table:_suffix}} by the quoted name with a suffix.

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
  -- Outbox order: assigned at insert. Equals commit order for one key when the
  -- app serializes writes to one aggregate (see docs/guarantees.md).
  seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id              uuid        NOT NULL,
  type            text        NOT NULL,
  aggregate_type  text        NOT NULL,
  aggregate_id    text        NOT NULL,
  key             text        NOT NULL,
  -- The hash slot of key; relays lease buckets, so one key has one relay at a time.
  bucket          smallint    NOT NULL GENERATED ALWAYS AS ((hashtext(key) & 255)) STORED,
  destination     text        NOT NULL,
  payload         jsonb       NOT NULL,
  headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,
  occurred_at     timestamptz NOT NULL DEFAULT now(),
  version         bigint,
  created_at      timestamptz NOT NULL DEFAULT now(),
  -- pending -> published | parked; parked -> pending (retry) | skipped | deleted (discard)
  state           text        NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'parked', 'published', 'skipped')),
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  last_error      text,
  parked_at       timestamptz,
  -- When the event left the queue: published or skipped. Retention keys on it.
  done_at         timestamptz,
  -- Set on rows written by `txbox replay`: the replay they belong to.
  replay_id       uuid,
  -- Routes that already acked this event, when a relay publishes to several transports.
  routes_done     text[]      NOT NULL DEFAULT '{}'
);

-- One row per event id, except replays, which re-send an id on purpose.
CREATE UNIQUE INDEX IF NOT EXISTS {{table:_id_key}} ON {{schema}}.{{table}} (id) WHERE replay_id IS NULL;
-- The claim scan: open rows in outbox order.
CREATE INDEX IF NOT EXISTS {{table:_open_seq_idx}} ON {{schema}}.{{table}} (seq) WHERE state IN ('pending', 'parked');
-- "Is an earlier event of this key blocked?" probes: only parked and backing-off rows, normally none.
CREATE INDEX IF NOT EXISTS {{table:_blocked_key_idx}} ON {{schema}}.{{table}} (key, seq)
  WHERE state = 'parked' OR (state = 'pending' AND next_attempt_at IS NOT NULL);
-- Retention: oldest finished rows first.
CREATE INDEX IF NOT EXISTS {{table:_done_idx}} ON {{schema}}.{{table}} (done_at) WHERE done_at IS NOT NULL;

-- Bucket leases. token is the fencing token of the current acquisition.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table:_buckets}} (
  bucket      smallint PRIMARY KEY,
  owner       text,
  token       bigint NOT NULL DEFAULT 0,
  lease_until timestamptz
);
INSERT INTO {{schema}}.{{table:_buckets}} (bucket) SELECT generate_series(0, 255) ON CONFLICT DO NOTHING;
CREATE SEQUENCE IF NOT EXISTS {{schema}}.{{table:_fence_seq}};

-- Live relays, for sharing buckets fairly and for `txbox status`.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table:_relays}} (
  relay_id        text PRIMARY KEY,
  host            text NOT NULL,
  pid             integer NOT NULL,
  started_at      timestamptz NOT NULL DEFAULT now(),
  heartbeat_at    timestamptz NOT NULL DEFAULT now(),
  in_flight       integer NOT NULL DEFAULT 0,
  published_total bigint NOT NULL DEFAULT 0,
  rate_per_minute real NOT NULL DEFAULT 0
);

-- Who did what to parked events, and replays.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table:_audit}} (
  at       timestamptz NOT NULL DEFAULT now(),
  action   text NOT NULL,
  event_id uuid,
  seq      bigint,
  actor    text NOT NULL,
  detail   text
);

-- The claim: publishable events of the given buckets, in outbox order.
-- Claims by state, never by "after the highest seq seen", so a transaction
-- that commits late with a lower seq is still found (commit-order gaps).
-- An event is publishable when no earlier event of its key is backing off or
-- parked (unless its destination is in p_skip). The SET clauses pin the plan
-- to an ordered scan of the open rows that stops after p_limit hits: without
-- fresh statistics (a new table, or PGlite, which has no autovacuum) the
-- planner would otherwise sort the whole backlog on every claim.
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
