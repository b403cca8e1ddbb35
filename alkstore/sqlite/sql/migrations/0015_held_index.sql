-- Per-key ordered delivery without an index entry per claim (docs/adr/0021, addendum
-- 2026-12-01c): PostgreSQL's index of an ordered key's jobs now holds only the held
-- ones. SQLite keeps its layout (its ordered drain already runs at about the unordered
-- one's rate): nothing to do here.
-- (A statement that changes nothing: every migration names its namespace.)
DELETE FROM {ns}__key_rate_windows WHERE 0;
