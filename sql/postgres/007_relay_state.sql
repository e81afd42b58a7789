-- txbox outbox, version 7: relay states for `txbox status`.
-- A relay that stops cleanly marks its row with left_at instead of deleting
-- it; lease_ttl_ms is the TTL it heartbeats with, so status can tell a live
-- relay (heartbeat younger than its TTL) from an expired one (killed or cut
-- off). Rows whose relay left or stopped heartbeating more than 24 hours ago
-- are deleted by the heartbeat statement. Running it again changes nothing.
ALTER TABLE {{schema}}.{{table:_relays}} ADD COLUMN IF NOT EXISTS left_at timestamptz;
ALTER TABLE {{schema}}.{{table:_relays}} ADD COLUMN IF NOT EXISTS lease_ttl_ms integer;
