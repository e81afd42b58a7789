-- txbox outbox, version 4: payload as json, not jsonb.
-- json keeps the text that enqueue wrote (JSON.stringify's output) byte for
-- byte, so relays read it as text and transports send it as it is, without
-- parsing it into objects and serializing them again (docs/performance.md,
-- finding 11). jsonb reordered an object's keys and added spaces.
-- Rewrites the table under an exclusive lock: quick for an outbox that
-- retention keeps small; plan a window for a large one. Running it again on a
-- json column changes nothing.
ALTER TABLE {{schema}}.{{table}} ALTER COLUMN payload TYPE json;
