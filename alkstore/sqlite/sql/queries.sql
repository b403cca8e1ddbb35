-- Named queries of the SQLite engine. {ns} is the namespace table prefix.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {ns}__schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)

-- name: applied_versions
SELECT version FROM {ns}__schema_migrations ORDER BY version

-- name: schema_version
SELECT max(version) FROM {ns}__schema_migrations

-- name: record_migration
INSERT INTO {ns}__schema_migrations (version, name, applied_at)
VALUES (?, ?, CAST(unixepoch('subsec') * 1000 AS INTEGER))

-- name: insert_event
INSERT INTO {ns}__events (type, key, headers, payload, appended_at)
VALUES (?, ?, ?, ?, CAST(unixepoch('subsec') * 1000 AS INTEGER))

-- name: read_events
SELECT position, type, key, headers, payload, appended_at
FROM {ns}__events
WHERE position > ?
ORDER BY position
LIMIT ?

-- name: head
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{ns}__events'), 0)

-- name: now_fragment
-- `{now}` in every query: the injected test clock's `now`, else SQLite's clock (ADR 0012).
-- A scalar subquery: SQLite computes it once per statement, not once per row (a claim
-- otherwise read the clock for every row it looked at: ~2.5 us per claimed job).
(SELECT coalesce(:now, CAST(unixepoch('subsec') * 1000 AS INTEGER)))

-- name: db_now
SELECT {now}

-- name: up_for_lease_fragment
-- PostgreSQL waits out a restart here (ADR 0012); an SQLite file has none.
1
