-- First-class schedules (docs/adr/0009-scheduler.md). A firing appends an event;
-- schedule_firings makes each (schedule, boundary) fire at most once.
CREATE TABLE {ns}__schedules (
    name         TEXT PRIMARY KEY,
    cron         TEXT,
    every_ms     INTEGER CHECK (every_ms > 0),
    tz           TEXT NOT NULL,
    catch_up     TEXT NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    start_at     INTEGER NOT NULL,
    event_type   TEXT NOT NULL,
    payload      TEXT NOT NULL,
    key          TEXT,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire_at INTEGER NOT NULL,
    last_fired   INTEGER,
    updated_at   INTEGER NOT NULL,
    CHECK ((cron IS NULL) <> (every_ms IS NULL))
);
CREATE INDEX {ns}__schedules_due ON {ns}__schedules (next_fire_at) WHERE NOT paused;

CREATE TABLE {ns}__schedule_firings (
    name     TEXT NOT NULL,
    boundary INTEGER NOT NULL,
    fired_at INTEGER NOT NULL,
    PRIMARY KEY (name, boundary)
);
