-- Subscriptions, the relay's batch step, named leases. {ns}: the schema.

-- name: subscribe
-- A new subscription records the positions it asked for that retention had pruned (the
-- gap, docs/adr/0020); an existing one keeps its checkpoint and gap.
INSERT INTO {ns}.subscriptions (queue, events, patterns, checkpoint, updated_at,
                                gap_first, gap_last, dedupe, replace_ms)
VALUES (%(queue)s, %(events)s::jsonb,
        ARRAY(SELECT jsonb_array_elements_text(%(patterns)s::jsonb)), %(checkpoint)s, {now},
        %(gap_first)s, %(gap_last)s, %(dedupe)s, %(replace_ms)s)
ON CONFLICT (queue) DO UPDATE SET
    events = excluded.events, patterns = excluded.patterns, updated_at = excluded.updated_at,
    dedupe = excluded.dedupe, replace_ms = excluded.replace_ms
WHERE {ns}.subscriptions.sink IS NULL  -- a sink's name is not a queue's (docs/adr/0026)
RETURNING checkpoint, gap_first, gap_last

-- name: unsubscribe
DELETE FROM {ns}.subscriptions WHERE queue = %(queue)s RETURNING queue

-- name: subscriptions
-- Queue names in byte order, as on SQLite, whatever the database's collation (ADR 0006,
-- addendum 2026-12-01).
SELECT queue, events::text, checkpoint, updated_at, gap_first, gap_last, sink,
       sink_options::text, parked, parked_at, dedupe, replace_ms
FROM {ns}.subscriptions
ORDER BY queue COLLATE "C"

-- name: set_checkpoint
-- A replay: the new checkpoint and the gap it asked for (NULL: none; docs/adr/0020).
UPDATE {ns}.subscriptions SET checkpoint = %(checkpoint)s, updated_at = {now},
    gap_first = %(gap_first)s, gap_last = %(gap_last)s
WHERE queue = %(queue)s RETURNING queue

-- name: replay_start
-- The subscription's checkpoint and the log head, the row locked until the replay commits
-- (a relay batch in flight finishes first: relay_bounds locks the same rows).
SELECT s.checkpoint, (SELECT head FROM {ns}.log_head)
FROM {ns}.subscriptions AS s WHERE s.queue = %(queue)s FOR UPDATE

-- name: count_events
-- Events still in the log in the range (low, high] (retention may have pruned some).
SELECT count(*) FROM {ns}.events WHERE position > %(low)s AND position <= %(high)s

-- name: relay_bounds
-- Locks every subscription row until the batch commits (a concurrent replay or
-- unsubscribe waits) and names them: insert and advance touch exactly these, so a
-- subscription created meanwhile is left for the next batch.
-- It also turns JIT off until the batch's transaction ends (set_config(..., true) is
-- SET LOCAL: never left behind on the pooled session). The batch's statements are
-- small; compiling one cost 144 ms against 0.12 ms of execution (docs/adr/0011).
-- Queue subscriptions only: the relay's sink loop feeds the others (docs/adr/0026).
-- The last column: those that replace by key (fanout.sql: relay_insert leaves them to
-- relay_replace, docs/adr/0022).
WITH subs AS (
    SELECT queue, checkpoint, replace_ms FROM {ns}.subscriptions WHERE sink IS NULL
    ORDER BY queue FOR UPDATE
), low AS (SELECT min(checkpoint) AS low FROM subs)
SELECT low.low, coalesce((
    SELECT max(position) FROM (
        SELECT position FROM {ns}.events
        WHERE position > low.low ORDER BY position LIMIT %(batch)s) AS b), low.low),
    (SELECT coalesce(jsonb_agg(queue), '[]')::text FROM subs),
    (SELECT coalesce(jsonb_agg(queue), '[]')::text FROM subs WHERE replace_ms IS NOT NULL)
FROM low, (SELECT set_config('jit', 'off', true)) AS no_jit

-- name: relay_lock_keys
-- Before relay_insert, in its transaction: the rows (job_groups) of the ordered keys the
-- batch writes, created or locked in sorted (queue, key) order, the order the promotion
-- of acked heads locks them in (migration 0012): a batch and an ack_many over the same
-- keys wait for each other, never deadlock (docs/adr/0021, addendum 2026-12-01). No
-- ordered queue in the batch: the one-time EXISTS ends it before the log is read.
SELECT {ns}.jobs_lock_keys(array_agg(k.queue ORDER BY k.queue, k.grp),
                           array_agg(k.grp ORDER BY k.queue, k.grp))
FROM (
    SELECT DISTINCT s.queue, e.key AS grp
    FROM {ns}.subscriptions AS s
    JOIN {ns}.queues AS q ON q.name = s.queue AND q.ordered
    JOIN {ns}.events AS e
      ON e.position > %(low)s AND e.position <= %(high)s AND e.position > s.checkpoint
    WHERE s.queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))
      AND EXISTS (SELECT 1 FROM {ns}.queues AS o WHERE o.ordered
                  AND o.name IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb)))
      AND e.key IS NOT NULL
      AND EXISTS (SELECT 1 FROM unnest(s.patterns) AS p WHERE e.type LIKE p)
) AS k
HAVING count(*) > 0

-- name: relay_insert
-- Returns one row: the number of jobs created (not every id). %(low)s (relay_bounds'
-- lowest checkpoint) gives the planner the range: it estimates the batch's rows, not a
-- third of the log (docs/adr/0011).
WITH inserted AS (
    INSERT INTO {ns}.jobs (queue, priority, visible_at, enqueued_at, max_attempts,
                           type, key, position, headers, payload, dedupe_key, grp)
    SELECT s.queue, 0, {now}, {now}, coalesce(q.max_attempts, {default_max_attempts}),
           e.type, e.key, e.position, e.headers, e.payload,
           CASE WHEN s.dedupe THEN e.key END,  -- dedupe_by_key (ADR 0022)
           CASE WHEN q.ordered THEN e.key END  -- an ordered queue: by event key (ADR 0021)
    FROM {ns}.subscriptions AS s
    JOIN {ns}.events AS e
      ON e.position > %(low)s AND e.position <= %(high)s AND e.position > s.checkpoint
    LEFT JOIN {ns}.queues AS q ON q.name = s.queue
    WHERE s.queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))
      AND EXISTS (SELECT 1 FROM unnest(s.patterns) AS p WHERE e.type LIKE p)
    ORDER BY e.position, s.queue
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted

-- name: relay_advance
UPDATE {ns}.subscriptions SET checkpoint = %(high)s, updated_at = {now}
WHERE checkpoint < %(high)s AND queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))

-- name: lag
-- Events still to relay: from the first one left after the checkpoint to the head.
-- Positions below it that retention pruned (a replay into pruned history) are not
-- counted: the relay passes them without a job (0 when none is left at all).
SELECT s.queue, s.checkpoint,
       CASE WHEN f.position IS NULL THEN 0
            ELSE greatest(h.head - greatest(s.checkpoint, f.position - 1), 0) END,
       f.appended_at, s.sink, s.parked
FROM {ns}.subscriptions AS s
CROSS JOIN {ns}.log_head AS h
LEFT JOIN LATERAL (
    SELECT e.position, e.appended_at FROM {ns}.events AS e
    WHERE e.position > s.checkpoint ORDER BY e.position LIMIT 1) AS f ON true
ORDER BY s.queue COLLATE "C"

-- name: oldest_position
-- The oldest position still in the log (NULL: none): retention pruned those before it.
SELECT min(position) FROM {ns}.events

-- name: prune_log
-- Events every subscription has passed and older than %(before)s, among the %(batch)s
-- oldest events: a prune with nothing to do reads %(batch)s events, not every event the
-- slowest checkpoint has passed (docs/adr/0018).
DELETE FROM {ns}.events WHERE id = ANY(ARRAY(  -- by primary key, never a scan of all
    SELECT oldest.id FROM (
        SELECT id, position, appended_at FROM {ns}.events
        WHERE position IS NOT NULL ORDER BY position LIMIT %(batch)s) AS oldest
    WHERE oldest.position <= (SELECT coalesce(min(checkpoint), 0) FROM {ns}.subscriptions)
      AND oldest.appended_at < to_timestamp(%(before)s / 1000.0)))
RETURNING id

-- name: oldest_writers
-- Writing transactions open in this database, oldest first (docs/adr/0020). One that
-- began under a second ago and is running a statement (an alkstore claim, a relay batch)
-- is work in progress, not a transaction held open: left out; one idle in transaction is
-- listed at any age. Ages count to clock_timestamp(), never below 0.
-- Another role's sessions show no start or query to a role without pg_read_all_stats:
-- left out here, counted by hidden_writers.
SELECT pid, greatest(extract(epoch FROM clock_timestamp() - xact_start), 0)::float8, state,
       left(query, 200)
FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND datname = current_database() AND pid <> pg_backend_pid()
  AND xact_start IS NOT NULL
  AND NOT (state = 'active' AND xact_start > clock_timestamp() - interval '1 second')
ORDER BY xact_start LIMIT 5

-- name: hidden_writers
-- Writing transactions whose details this role may not see (see oldest_writers).
SELECT count(*) FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND datname = current_database() AND xact_start IS NULL

-- name: unsequenced
-- Committed events that no reader has numbered yet (the partial index on them).
SELECT count(*) FROM {ns}.events WHERE position IS NULL

-- name: oldest_appender
-- The oldest open transaction that wrote into this namespace's log and has not ended:
-- its events are unsequenced until it commits (ADR 0004). Writing takes ROW EXCLUSIVE
-- on the table until the transaction ends; so do our own sequencer and pruning, for
-- the length of one statement.
-- Work in progress (our sequencer's statement) and sessions whose details this role may
-- not see are left out, as in oldest_writers.
SELECT a.pid, greatest(extract(epoch FROM clock_timestamp() - a.xact_start), 0)::float8,
       a.state, left(a.query, 200)
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = '{ns}.events'::regclass
  AND l.mode = 'RowExclusiveLock' AND l.granted
  AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
  AND NOT (a.state = 'active' AND a.xact_start > clock_timestamp() - interval '1 second')
ORDER BY a.xact_start LIMIT 1

-- name: lock_acquire
INSERT INTO {ns}.locks (name, holder, token, expires_at)
VALUES (%(name)s, %(holder)s, 1, {now} + %(ttl_ms)s)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder, token = {ns}.locks.token + 1, expires_at = excluded.expires_at
WHERE {ns}.locks.expires_at <= {now} OR {ns}.locks.holder = excluded.holder
RETURNING token

-- name: lock_renew
UPDATE {ns}.locks SET expires_at = {now} + %(ttl_ms)s
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s
RETURNING token

-- name: lock_release
UPDATE {ns}.locks SET expires_at = 0  -- the row stays: tokens only ever grow
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s

-- name: lock_holder
SELECT holder, token, expires_at FROM {ns}.locks WHERE name = %(name)s

-- name: subscribe_sink
-- A broker sink (docs/adr/0026): like subscribe, with the sink's URL and options; an
-- existing sink keeps its checkpoint (and stays parked if it was); a queue subscription
-- of that name is not turned into one (no row: refused).
INSERT INTO {ns}.subscriptions (queue, events, patterns, checkpoint, updated_at,
                                gap_first, gap_last, sink, sink_options)
VALUES (%(queue)s, %(events)s::jsonb,
        ARRAY(SELECT jsonb_array_elements_text(%(patterns)s::jsonb)), %(checkpoint)s, {now},
        %(gap_first)s, %(gap_last)s, %(sink)s, %(options)s::jsonb)
ON CONFLICT (queue) DO UPDATE SET
    events = excluded.events, patterns = excluded.patterns, updated_at = excluded.updated_at,
    sink = excluded.sink, sink_options = excluded.sink_options
WHERE {ns}.subscriptions.sink IS NOT NULL
RETURNING checkpoint, gap_first, gap_last

-- name: sink_bounds
-- The next batch of a sink (docs/adr/0026): its checkpoint (or %(after)s, a batch read
-- ahead) and the last position of the %(batch)s events after it (the start when there
-- are none); no row when it is gone, not a sink, or parked. JIT off for the
-- transaction, as relay_bounds (ADR 0011), and its commit (the lease renewal's) does
-- not wait for the WAL flush: a renewal lost in a crash only shortens the lease.
SELECT f.low, coalesce((
    SELECT max(position) FROM (
        SELECT position FROM {ns}.events
        WHERE position > f.low ORDER BY position LIMIT %(batch)s) AS b), f.low),
    f.patterns
FROM (SELECT coalesce(%(after)s::bigint, s.checkpoint) AS low,
             array_to_json(s.patterns)::text AS patterns
      FROM {ns}.subscriptions AS s,
           (SELECT set_config('jit', 'off', true),
                   set_config('synchronous_commit', 'off', true)) AS settings
      WHERE s.queue = %(name)s AND s.sink IS NOT NULL AND s.parked IS NULL) AS f

-- name: sink_events
-- The events of (low, high] whose type matches the sink's LIKE patterns, in log order.
SELECT e.position, e.type, e.key, e.headers::text, e.payload::text, e.appended_at
FROM {ns}.events AS e
WHERE e.position > %(low)s AND e.position <= %(high)s
  AND EXISTS (SELECT 1 FROM json_array_elements_text(%(events)s::json) AS p
              WHERE e.type LIKE p)
ORDER BY e.position

-- name: sink_advance
-- Only from the checkpoint the batch was read at: a replay meanwhile wins. Committed
-- without waiting for the WAL flush (SET LOCAL synchronous_commit = off): a crash may
-- lose the move, and the batch is published again (at-least-once, ids unchanged); it
-- never moves the checkpoint past what the broker confirmed (docs/adr/0026).
UPDATE {ns}.subscriptions SET checkpoint = %(high)s, updated_at = {now}
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS settings
WHERE queue = %(name)s AND checkpoint = %(low)s AND sink IS NOT NULL
RETURNING queue

-- name: sink_park
UPDATE {ns}.subscriptions SET parked = %(reason)s, parked_at = {now}, updated_at = {now}
WHERE queue = %(name)s AND sink IS NOT NULL
RETURNING queue

-- name: sink_resume
UPDATE {ns}.subscriptions SET parked = NULL, parked_at = NULL, updated_at = {now}
WHERE queue = %(name)s AND sink IS NOT NULL
RETURNING queue
