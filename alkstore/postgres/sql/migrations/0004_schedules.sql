-- First-class schedules (docs/adr/0009-scheduler.md). A firing appends an event;
-- schedule_firings makes each (schedule, boundary) fire at most once.
CREATE TABLE {ns}.schedules (
    name         text PRIMARY KEY,
    cron         text,
    every_ms     bigint CHECK (every_ms > 0),
    tz           text NOT NULL,
    catch_up     text NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    start_at     bigint NOT NULL,
    event_type   text NOT NULL,
    payload      jsonb NOT NULL,
    key          text,
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at bigint NOT NULL,
    last_fired   bigint,
    updated_at   bigint NOT NULL,
    CHECK ((cron IS NULL) <> (every_ms IS NULL))
);
CREATE INDEX schedules_due ON {ns}.schedules (next_fire_at) WHERE NOT paused;

CREATE TABLE {ns}.schedule_firings (
    name     text NOT NULL,
    boundary bigint NOT NULL,
    fired_at bigint NOT NULL,
    PRIMARY KEY (name, boundary)
);
