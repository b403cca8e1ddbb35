-- Subscriptions route events into queues (docs/adr/0007-relay.md). Each has
-- its own checkpoint: the last log position it has turned into jobs.
CREATE TABLE {ns}__subscriptions (
    queue      TEXT PRIMARY KEY,
    events     TEXT NOT NULL,  -- JSON: the patterns as given, e.g. ["order.*"]
    patterns   TEXT NOT NULL,  -- JSON: the same as LIKE patterns (escape character \)
    checkpoint INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
