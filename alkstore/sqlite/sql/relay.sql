-- Subscriptions, the relay's batch step, named leases. {ns}: the table prefix.

-- name: subscribe
-- A new subscription records the positions it asked for that retention had pruned (the
-- gap, docs/adr/0020); an existing one keeps its checkpoint and gap.
INSERT INTO {ns}__subscriptions (queue, events, patterns, checkpoint, updated_at,
                                 gap_first, gap_last)
VALUES (:queue, :events, :patterns, :checkpoint, {now}, :gap_first, :gap_last)
ON CONFLICT (queue) DO UPDATE SET
    events = excluded.events, patterns = excluded.patterns, updated_at = excluded.updated_at
RETURNING checkpoint, gap_first, gap_last

-- name: unsubscribe
DELETE FROM {ns}__subscriptions WHERE queue = :queue RETURNING queue

-- name: subscriptions
SELECT queue, events, checkpoint, updated_at, gap_first, gap_last
FROM {ns}__subscriptions ORDER BY queue

-- name: set_checkpoint
-- A replay: the new checkpoint and the gap it asked for (NULL: none; docs/adr/0020).
UPDATE {ns}__subscriptions SET checkpoint = :checkpoint, updated_at = {now},
    gap_first = :gap_first, gap_last = :gap_last
WHERE queue = :queue RETURNING queue

-- name: replay_start
-- The subscription's checkpoint and the log head, in the replay's write transaction
-- (SQLite's single writer keeps both from moving until it commits).
SELECT checkpoint, coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{ns}__events'), 0)
FROM {ns}__subscriptions WHERE queue = :queue

-- name: count_events
-- Events still in the log in the range (:low, :high] (retention may have pruned some).
SELECT count(*) FROM {ns}__events WHERE position > :low AND position <= :high

-- name: relay_bounds
-- Names the subscriptions the batch covers (SQLite's single writer already keeps
-- them from changing until the batch commits).
WITH low AS (SELECT min(checkpoint) AS low FROM {ns}__subscriptions)
SELECT low.low, coalesce((
    SELECT max(position) FROM (
        SELECT position FROM {ns}__events
        WHERE position > low.low ORDER BY position LIMIT :batch)), low.low),
    (SELECT json_group_array(queue) FROM {ns}__subscriptions)
FROM low

-- name: relay_insert
-- Returns one row: the number of jobs created (changes(): RETURNING id cost a quarter of
-- a 5,000-event batch). GLOB, not LIKE: case-sensitive as on PostgreSQL (patterns only
-- contain * wildcards). The log is read as a range of rowids, (:low, :high] (relay_bounds'
-- lowest checkpoint and the batch's end), once per subscription: CROSS JOIN keeps the
-- subscriptions in the outer loop, so each event row is looked at once per subscription
-- and no lookup of s or q repeats per event. The IN list walks the queues in order, so
-- ORDER BY needs no sort. Without :low the plan walked the log from position 1 on every
-- batch (docs/adr/0011).
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, max_attempts,
                        type, key, position, headers, payload, grp)
SELECT s.queue, 0, {now}, {now}, coalesce(q.max_attempts, {default_max_attempts}),
       e.type, e.key, e.position, e.headers, e.payload,
       CASE WHEN q.ordered THEN e.key END  -- an ordered queue: by event key (ADR 0021)
FROM {ns}__subscriptions AS s
LEFT JOIN {ns}__queues AS q ON q.name = s.queue
CROSS JOIN {ns}__events AS e
WHERE s.queue IN (SELECT value FROM json_each(:queues))
  AND e.position > :low AND e.position <= :high AND e.position > s.checkpoint
  AND EXISTS (SELECT 1 FROM json_each(s.events) AS p WHERE e.type GLOB p.value)
ORDER BY s.queue, e.position;
SELECT changes()

-- name: relay_advance
UPDATE {ns}__subscriptions SET checkpoint = :high, updated_at = {now}
WHERE checkpoint < :high AND queue IN (SELECT value FROM json_each(:queues))

-- name: lag
-- Events still to relay: from the first one left after the checkpoint to the head.
-- Positions below it that retention pruned (a replay into pruned history) are not
-- counted: the relay passes them without a job (0 when none is left at all).
SELECT f.queue, f.checkpoint,
       CASE WHEN f.first_pos IS NULL THEN 0
            ELSE max(f.head - max(f.checkpoint, f.first_pos - 1), 0) END,
       (SELECT e.appended_at FROM {ns}__events AS e WHERE e.position = f.first_pos)
FROM (
    SELECT s.queue, s.checkpoint,
           (SELECT min(e.position) FROM {ns}__events AS e WHERE e.position > s.checkpoint)
               AS first_pos,
           coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{ns}__events'), 0) AS head
    FROM {ns}__subscriptions AS s) AS f
ORDER BY f.queue

-- name: oldest_position
-- The oldest position still in the log (NULL: none): retention pruned those before it.
SELECT min(position) FROM {ns}__events

-- name: prune_log
-- Events every subscription has passed and older than :before, among the :batch oldest
-- events: a prune with nothing to do reads :batch events, not every event the slowest
-- checkpoint has passed (docs/adr/0018).
DELETE FROM {ns}__events WHERE position IN (
    SELECT position FROM (
        SELECT position, appended_at FROM {ns}__events ORDER BY position LIMIT :batch)
    WHERE position <= (SELECT coalesce(min(checkpoint), 0) FROM {ns}__subscriptions)
      AND appended_at < :before)
RETURNING position

-- name: lock_acquire
INSERT INTO {ns}__locks (name, holder, token, expires_at)
VALUES (:name, :holder, 1, {now} + :ttl_ms)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder, token = token + 1, expires_at = excluded.expires_at
WHERE expires_at <= {now} OR holder = excluded.holder
RETURNING token

-- name: lock_renew
UPDATE {ns}__locks SET expires_at = {now} + :ttl_ms
WHERE name = :name AND holder = :holder AND token = :token
RETURNING token

-- name: lock_release
UPDATE {ns}__locks SET expires_at = 0  -- the row stays: tokens only ever grow
WHERE name = :name AND holder = :holder AND token = :token

-- name: lock_holder
SELECT holder, token, expires_at FROM {ns}__locks WHERE name = :name
