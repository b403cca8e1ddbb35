-- A key at its limit no longer hides the other keys' jobs (docs/adr/0021, addendum of
-- 2026-12-01). On PostgreSQL the limited claim is a function, replaced by this
-- migration; SQLite's is a statement (sql/queues.sql, claim_limited), changed with it:
-- nothing to do here.
-- (A statement that changes nothing: every migration names its namespace.)
DELETE FROM {ns}__key_rate_windows WHERE 0;
