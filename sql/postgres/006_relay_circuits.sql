-- txbox outbox, version 6: each relay's open circuits (destinations it has
-- paused because they answered as down: HTTP 401/403/404, connection refused,
-- DNS failure, a broker refusing the credentials), written at every
-- heartbeat, so that `txbox status` in another process shows them. A JSON
-- array of {destination, reason, openSince, nextProbeAt, failedProbes}.
-- Running it again changes nothing.
ALTER TABLE {{schema}}.{{table:_relays}} ADD COLUMN IF NOT EXISTS circuits jsonb NOT NULL DEFAULT '[]'::jsonb;
