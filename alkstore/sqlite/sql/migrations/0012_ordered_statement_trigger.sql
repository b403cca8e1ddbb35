-- Per-key ordered delivery (docs/adr/0021, addendum 2026-12-01). PostgreSQL's migration
-- 0012 turns its promotion trigger into a statement trigger that locks the keys of the
-- acked heads in sorted order. Nothing changes here: SQLite's one writer (BEGIN
-- IMMEDIATE) never interleaves two writers of a key, and {ns}__jobs_promote is one
-- UPDATE already, with no lock to order. The version is kept so that both engines have
-- the same migrations (tests/unit/test_engine_seam.py).
SELECT 1 WHERE 0;
