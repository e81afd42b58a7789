-- txbox inbox, version 2: when an event was (last) held or re-checked, so that
-- held events are re-checked periodically, oldest first and a bounded number
-- at a time, even if the release that follows their missing version was
-- missed (a hold that committed after the missing version's transaction
-- looked for held events). Rows held before this version have NULL: first.

ALTER TABLE {{schema}}.{{table}} ADD COLUMN IF NOT EXISTS held_at timestamptz;

CREATE INDEX IF NOT EXISTS {{table:_held_idx}} ON {{schema}}.{{table}} (consumer, held_at NULLS FIRST) WHERE status = 'held';
