-- txbox outbox on MySQL, version 2: each relay's open circuits (destinations it
-- has paused because they answered as down: HTTP 401/403/404, connection
-- refused, DNS failure, a broker refusing the credentials), written at every
-- heartbeat, so that `txbox status` in another process shows them. A JSON
-- array of {destination, reason, openSince, nextProbeAt, failedProbes}; NULL
-- for rows written before this version (read as none). MySQL 8 has no
-- ADD COLUMN IF NOT EXISTS: a rerun after a crash between this statement and
-- its record in the migrations table finds the column there (errno 1060),
-- which the migration runner counts as applied.
ALTER TABLE {{relays}} ADD COLUMN circuits LONGTEXT NULL CHECK (circuits IS NULL OR json_valid(circuits));
