-- Throughput per queue (docs/adr/0023, addendum 2026-12-01): each worker writes what it
-- has done since it started into its row at every refresh (no write per job). counts:
-- {"queue": {"done": n, "retried": n, "dead": n}, ...} for every queue it serves;
-- NULL: a process that reports none (an older worker, or a row written without counts).
ALTER TABLE {ns}.workers ADD COLUMN counts jsonb;
