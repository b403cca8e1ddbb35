-- Schedules. {ns}: the table prefix. Times: epoch milliseconds.

-- name: schedule_insert
INSERT INTO {ns}__schedules (name, cron, every_ms, tz, catch_up, start_at, event_type, payload,
                            key, next_fire_at, updated_at)
VALUES (:name, :cron, :every_ms, :tz, :catch_up, :start_at, :event_type,
        :payload, :key, :next_fire_at, {now})
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: schedule_update
UPDATE {ns}__schedules SET cron = :cron, every_ms = :every_ms, tz = :tz,
    catch_up = :catch_up, start_at = :start_at, event_type = :event_type,
    payload = :payload, key = :key, next_fire_at = :next_fire_at,
    updated_at = {now}
WHERE name = :name
RETURNING name

-- name: schedule_pause
UPDATE {ns}__schedules SET paused = 1, updated_at = {now} WHERE name = :name
RETURNING name

-- name: schedule_resume
UPDATE {ns}__schedules SET paused = 0, next_fire_at = :next_fire_at, updated_at = {now}
WHERE name = :name AND paused
RETURNING name

-- name: schedule_remove
DELETE FROM {ns}__schedule_firings WHERE name = :name;
DELETE FROM {ns}__schedules WHERE name = :name RETURNING name

-- name: schedule_get
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload, key, paused,
       next_fire_at, last_fired
FROM {ns}__schedules WHERE name = :name

-- name: schedule_list
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload, key, paused,
       next_fire_at, last_fired
FROM {ns}__schedules ORDER BY name

-- name: schedule_due
-- Due schedules, and those whose next_fire_at was set when the clock read more than
-- rewind_ms later than now: it went back since, and the tick moves them to the next
-- boundary after now (ADR 0009, addendum 2026-12-01).
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload, key, paused,
       next_fire_at, last_fired, updated_at
FROM {ns}__schedules WHERE NOT paused AND (next_fire_at <= {now}
    OR updated_at > {now} + :rewind_ms)
ORDER BY next_fire_at LIMIT :limit

-- name: schedule_advance
UPDATE {ns}__schedules SET next_fire_at = :next_fire_at,
    last_fired = coalesce(:last_fired, last_fired), updated_at = {now}
WHERE name = :name AND next_fire_at = :expected AND NOT paused
RETURNING name

-- name: schedule_fired
INSERT INTO {ns}__schedule_firings (name, boundary, fired_at)
VALUES (:name, :boundary, {now})
ON CONFLICT DO NOTHING
RETURNING boundary

-- name: schedule_prune_firings
DELETE FROM {ns}__schedule_firings WHERE fired_at < :before

-- name: schedule_next
SELECT min(next_fire_at) FROM {ns}__schedules WHERE NOT paused
