-- Subscriptions route events into queues (docs/adr/0007-relay.md). Each has
-- its own checkpoint: the last log position it has turned into jobs.
CREATE TABLE {ns}.subscriptions (
    queue      text PRIMARY KEY,
    events     jsonb NOT NULL,   -- the patterns as given, e.g. ["order.*"]
    patterns   text[] NOT NULL,  -- the same as LIKE patterns (escape character \)
    checkpoint bigint NOT NULL,
    updated_at bigint NOT NULL
);
