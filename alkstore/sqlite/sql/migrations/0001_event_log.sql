-- The event log. On SQLite one writer commits at a time, so the rowid assigned
-- inside the write transaction is already commit order (docs/adr/0004).
-- AUTOINCREMENT: a pruned position is never handed out again.
CREATE TABLE {ns}__events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT NOT NULL,
    key         TEXT,
    headers     TEXT,
    payload     TEXT NOT NULL,
    appended_at INTEGER NOT NULL  -- unix epoch milliseconds
);
