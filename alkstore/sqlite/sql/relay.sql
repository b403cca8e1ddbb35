-- Subscriptions, the relay's batch step, named leases. {ns}: the table prefix.

-- name: subscribe
-- A new subscription records the positions it asked for that retention had pruned (the
-- gap, docs/adr/0020); an existing one keeps its checkpoint and gap.
INSERT INTO {ns}__subscriptions (queue, events, patterns, checkpoint, updated_at,
                                 gap_first, gap_last, dedupe, replace_ms)
VALUES (:queue, :events, :patterns, :checkpoint, {now}, :gap_first, :gap_last, :dedupe,
        :replace_ms)
ON CONFLICT (queue) DO UPDATE SET
    events = excluded.events, patterns = excluded.patterns, updated_at = excluded.updated_at,
    dedupe = excluded.dedupe, replace_ms = excluded.replace_ms
WHERE sink IS NULL  -- a sink's name is not a queue's (docs/adr/0026): no row, refused
RETURNING checkpoint, gap_first, gap_last

-- name: unsubscribe
DELETE FROM {ns}__subscriptions WHERE queue = :queue RETURNING queue

-- name: subscriptions
SELECT queue, events, checkpoint, updated_at, gap_first, gap_last, sink, sink_options, parked,
       parked_at, dedupe, replace_ms
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
-- them from changing until the batch commits), and those of them that replace by key
-- (fanout.sql: relay_insert leaves them to relay_replace, docs/adr/0022).
-- Queue subscriptions only: the relay's sink loop feeds the others (docs/adr/0026).
WITH low AS (SELECT min(checkpoint) AS low FROM {ns}__subscriptions WHERE sink IS NULL)
SELECT low.low, coalesce((
    SELECT max(position) FROM (
        SELECT position FROM {ns}__events
        WHERE position > low.low ORDER BY position LIMIT :batch)), low.low),
    (SELECT json_group_array(queue) FROM {ns}__subscriptions WHERE sink IS NULL),
    (SELECT json_group_array(queue) FROM {ns}__subscriptions
     WHERE sink IS NULL AND replace_ms IS NOT NULL)
FROM low

-- name: relay_lock_keys
-- PostgreSQL locks the batch's ordered keys in sorted order first (docs/adr/0021,
-- addendum 2026-12-01); SQLite's one writer (BEGIN IMMEDIATE) has nothing to order.
SELECT 1 WHERE 0

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
                        type, key, position, headers, payload, dedupe_key, grp)
SELECT s.queue, 0, {now}, {now}, coalesce(q.max_attempts, {default_max_attempts}),
       e.type, e.key, e.position, e.headers, e.payload,
       CASE WHEN s.dedupe THEN e.key END,  -- dedupe_by_key (ADR 0022)
       CASE WHEN q.ordered THEN e.key END  -- an ordered queue: by event key (ADR 0021)
FROM {ns}__subscriptions AS s
LEFT JOIN {ns}__queues AS q ON q.name = s.queue
CROSS JOIN {ns}__events AS e
WHERE s.queue IN (SELECT value FROM json_each(:queues))
  AND e.position > :low AND e.position <= :high AND e.position > s.checkpoint
  AND EXISTS (SELECT 1 FROM json_each(s.events) AS p WHERE e.type GLOB p.value)
ORDER BY s.queue, e.position
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING;
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
       (SELECT e.appended_at FROM {ns}__events AS e WHERE e.position = f.first_pos),
       f.sink, f.parked
FROM (
    SELECT s.queue, s.checkpoint, s.sink, s.parked,
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

-- name: subscribe_sink
-- A broker sink (docs/adr/0026): like subscribe, with the sink's URL and options; an
-- existing sink keeps its checkpoint (and stays parked if it was); a queue subscription
-- of that name is not turned into one (no row: refused).
INSERT INTO {ns}__subscriptions (queue, events, patterns, checkpoint, updated_at,
                                 gap_first, gap_last, sink, sink_options)
VALUES (:queue, :events, :patterns, :checkpoint, {now}, :gap_first, :gap_last, :sink,
        :options)
ON CONFLICT (queue) DO UPDATE SET
    events = excluded.events, patterns = excluded.patterns, updated_at = excluded.updated_at,
    sink = excluded.sink, sink_options = excluded.sink_options
WHERE sink IS NOT NULL
RETURNING checkpoint, gap_first, gap_last

-- name: sink_bounds
-- The next batch of a sink (docs/adr/0026): its checkpoint (or :after, a batch read
-- ahead) and the last position of the :batch events after it (the start when there are
-- none); no row when it is gone, not a sink, or parked.
SELECT f.low, coalesce((
    SELECT max(position) FROM (
        SELECT position FROM {ns}__events
        WHERE position > f.low ORDER BY position LIMIT :batch)), f.low),
    f.events
FROM (SELECT coalesce(:after, s.checkpoint) AS low, s.events
      FROM {ns}__subscriptions AS s
      WHERE s.queue = :name AND s.sink IS NOT NULL AND s.parked IS NULL) AS f

-- name: sink_events
-- The events of (:low, :high] whose type matches the sink's patterns, in log order.
SELECT e.position, e.type, e.key, e.headers, e.payload, e.appended_at
FROM {ns}__events AS e
WHERE e.position > :low AND e.position <= :high
  AND EXISTS (SELECT 1 FROM json_each(:events) AS p WHERE e.type GLOB p.value)
ORDER BY e.position

-- name: sink_advance
-- Only from the checkpoint the batch was read at: a replay meanwhile wins.
UPDATE {ns}__subscriptions SET checkpoint = :high, updated_at = {now}
WHERE queue = :name AND checkpoint = :low AND sink IS NOT NULL
RETURNING queue

-- name: sink_park
UPDATE {ns}__subscriptions SET parked = :reason, parked_at = {now}, updated_at = {now}
WHERE queue = :name AND sink IS NOT NULL
RETURNING queue

-- name: sink_resume
UPDATE {ns}__subscriptions SET parked = NULL, parked_at = NULL, updated_at = {now}
WHERE queue = :name AND sink IS NOT NULL
RETURNING queue
