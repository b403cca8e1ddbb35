-- Counts for an operator's screen that refreshes every few seconds (docs/adr/0023): at
-- scale, the planner's estimates instead of counting a million rows per refresh. Each
-- `estimate_*` query returns the EXPLAIN of a count's scan: its "Plan Rows" are the
-- estimate (the planner scales its statistics to the table's current size). Running
-- jobs and the oldest ready job stay exact: both read an index, not the queue.

-- name: estimate_jobs
EXPLAIN (FORMAT JSON) SELECT 1 FROM {ns}.jobs

-- name: estimate_queue_jobs
EXPLAIN (FORMAT JSON) SELECT 1 FROM {ns}.jobs WHERE queue = %(queue)s

-- name: estimate_queue_scheduled
EXPLAIN (FORMAT JSON)
SELECT 1 FROM {ns}.jobs WHERE queue = %(queue)s AND visible_at > %(at)s::bigint

-- name: estimate_dead
EXPLAIN (FORMAT JSON) SELECT 1 FROM {ns}.dead_letters

-- name: estimate_queue_dead
EXPLAIN (FORMAT JSON) SELECT 1 FROM {ns}.dead_letters WHERE queue = %(queue)s

-- name: queue_running
-- Leased jobs, through the jobs_leases partial index (as many as the workers hold).
SELECT count(*) FROM {ns}.jobs
WHERE lease_token IS NOT NULL AND queue = %(queue)s
  AND (visible_at > {now} OR attempts >= max_attempts)

-- name: queue_oldest_ready
-- The oldest ready job's age in ms: its queue's priorities by a loose scan of the claim
-- index, then per priority the first ready job in visible_at order (a few index probes).
WITH RECURSIVE p (priority) AS (
    (SELECT priority FROM {ns}.jobs WHERE queue = %(queue)s ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}.jobs AS j
            WHERE j.queue = %(queue)s AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL
)
SELECT {now} - min(o.visible_at)
FROM p CROSS JOIN LATERAL (
    SELECT visible_at FROM {ns}.jobs AS j
    WHERE j.queue = %(queue)s AND j.priority = p.priority AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    ORDER BY j.priority DESC, j.visible_at, j.id
    LIMIT 1
) AS o

-- name: queue_names
-- Every queue's name (declared, subscribed, or holding jobs or dead letters) without
-- reading every job: a loose scan of the claim and dead-letter indexes, one probe a name.
WITH RECURSIVE j (queue) AS (
    (SELECT queue FROM {ns}.jobs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT n.queue FROM {ns}.jobs AS n WHERE n.queue > j.queue ORDER BY n.queue LIMIT 1)
    FROM j WHERE j.queue IS NOT NULL
), d (queue) AS (
    (SELECT queue FROM {ns}.dead_letters ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT n.queue FROM {ns}.dead_letters AS n WHERE n.queue > d.queue
            ORDER BY n.queue LIMIT 1)
    FROM d WHERE d.queue IS NOT NULL
), names (name) AS (
    SELECT name FROM {ns}.queues
    UNION SELECT queue FROM {ns}.subscriptions
    UNION SELECT queue FROM j WHERE queue IS NOT NULL
    UNION SELECT queue FROM d WHERE queue IS NOT NULL
)
SELECT n.name, coalesce(q.paused, false)
FROM names AS n LEFT JOIN {ns}.queues AS q ON q.name = n.name
ORDER BY n.name COLLATE "C"

-- name: queue_paused
SELECT coalesce((SELECT paused FROM {ns}.queues WHERE name = %(queue)s), false)
