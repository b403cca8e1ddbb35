-- Schedules. {ns}: the schema. Times: epoch milliseconds.

-- name: schedule_insert
INSERT INTO {ns}.schedules (name, cron, every_ms, tz, catch_up, start_at, event_type, payload,
                            key, next_fire_at, updated_at)
VALUES (%(name)s, %(cron)s, %(every_ms)s, %(tz)s, %(catch_up)s, %(start_at)s, %(event_type)s,
        %(payload)s::jsonb, %(key)s, %(next_fire_at)s, {now})
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: schedule_update
UPDATE {ns}.schedules SET cron = %(cron)s, every_ms = %(every_ms)s, tz = %(tz)s,
    catch_up = %(catch_up)s, start_at = %(start_at)s, event_type = %(event_type)s,
    payload = %(payload)s::jsonb, key = %(key)s, next_fire_at = %(next_fire_at)s,
    updated_at = {now}
WHERE name = %(name)s
RETURNING name

-- name: schedule_pause
UPDATE {ns}.schedules SET paused = true, updated_at = {now} WHERE name = %(name)s
RETURNING name

-- name: schedule_resume
UPDATE {ns}.schedules SET paused = false, next_fire_at = %(next_fire_at)s, updated_at = {now}
WHERE name = %(name)s AND paused
RETURNING name

-- name: schedule_remove
WITH firings AS (DELETE FROM {ns}.schedule_firings WHERE name = %(name)s)
DELETE FROM {ns}.schedules WHERE name = %(name)s RETURNING name

-- name: schedule_get
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload::text, key, paused,
       next_fire_at, last_fired
FROM {ns}.schedules WHERE name = %(name)s

-- name: schedule_list
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload::text, key, paused,
       next_fire_at, last_fired
FROM {ns}.schedules ORDER BY name

-- name: schedule_due
-- Due schedules, and those whose next_fire_at was set when the clock read more than
-- rewind_ms later than now: it went back since, and the tick moves them to the next
-- boundary after now (ADR 0009, addendum 2026-12-01).
SELECT name, cron, every_ms, tz, catch_up, start_at, event_type, payload::text, key, paused,
       next_fire_at, last_fired, updated_at
FROM {ns}.schedules WHERE NOT paused AND (next_fire_at <= {now}
    OR updated_at > {now} + %(rewind_ms)s)
ORDER BY next_fire_at LIMIT %(limit)s

-- name: schedule_advance
UPDATE {ns}.schedules SET next_fire_at = %(next_fire_at)s,
    last_fired = coalesce(%(last_fired)s, last_fired), updated_at = {now}
WHERE name = %(name)s AND next_fire_at = %(expected)s AND NOT paused
RETURNING name

-- name: schedule_fired
INSERT INTO {ns}.schedule_firings (name, boundary, fired_at)
VALUES (%(name)s, %(boundary)s, {now})
ON CONFLICT DO NOTHING
RETURNING boundary

-- name: schedule_prune_firings
DELETE FROM {ns}.schedule_firings WHERE fired_at < %(before)s

-- name: schedule_next
SELECT min(next_fire_at) FROM {ns}.schedules WHERE NOT paused
