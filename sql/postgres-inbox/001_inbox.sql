-- txbox inbox, version 1. Placeholders as in sql/postgres/.
-- One row per (consumer, event id): the handler's writes and the row's
-- 'processed' mark commit in one transaction, so a redelivered id is skipped.

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
  consumer      text        NOT NULL,
  event_id      uuid        NOT NULL,
  type          text        NOT NULL,
  key           text        NOT NULL,
  version       bigint,
  -- processed: applied once. failed: the handler threw; the broker redelivers (or txbox redrives).
  -- dead: gave up after max attempts. held: waits for an earlier version (projection gap).
  -- retry: an operator asked to run it again (`txbox inbox dead retry`).
  status        text        NOT NULL CHECK (status IN ('processed', 'failed', 'dead', 'held', 'retry')),
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text,
  received_at   timestamptz NOT NULL DEFAULT now(),
  processed_at  timestamptz,
  -- The envelope, kept only while the event may have to run again (failed, dead, held, retry).
  envelope      jsonb,
  PRIMARY KEY (consumer, event_id)
);

CREATE INDEX IF NOT EXISTS {{table:_pending_idx}} ON {{schema}}.{{table}} (consumer, status, key, version)
  WHERE status IN ('failed', 'dead', 'held', 'retry');
CREATE INDEX IF NOT EXISTS {{table:_processed_idx}} ON {{schema}}.{{table}} (processed_at) WHERE status = 'processed';

-- Who retried or discarded dead events.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table:_audit}} (
  at       timestamptz NOT NULL DEFAULT now(),
  action   text NOT NULL,
  consumer text NOT NULL,
  event_id uuid,
  actor    text NOT NULL,
  detail   text
);
