-- Counts for an operator's screen that refreshes every few seconds (docs/adr/0023). SQLite
-- keeps no planner statistics to estimate from; at scale it counts from the indexes alone
-- instead of reading every job: `estimate_jobs` is the span of the jobs' ids (two probes of
-- the primary key: at least the row count), the queue's jobs are counted in the claim
-- index, its scheduled (and leased) ones per priority in the same index by visible_at.
-- Unclaimable jobs the sweep has not buried yet count as ready: an estimate.

-- name: estimate_jobs
-- Two subqueries: max(id) - min(id) in one SELECT would scan an index instead of probing.
SELECT coalesce((SELECT max(id) FROM {ns}__jobs) - (SELECT min(id) FROM {ns}__jobs) + 1, 0)

-- name: estimate_queue_jobs
SELECT count(*) FROM {ns}__jobs WHERE queue = :queue

-- name: estimate_queue_scheduled
WITH RECURSIVE p (priority) AS (
    SELECT (SELECT priority FROM {ns}__jobs WHERE queue = :queue ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}__jobs AS j
            WHERE j.queue = :queue AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL
)
SELECT coalesce(sum((
    SELECT count(*) FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority = p.priority AND j.visible_at > :at)), 0)
FROM p WHERE p.priority IS NOT NULL

-- name: estimate_dead
SELECT coalesce(
    (SELECT max(id) FROM {ns}__dead_letters) - (SELECT min(id) FROM {ns}__dead_letters) + 1, 0)

-- name: estimate_queue_dead
SELECT count(*) FROM {ns}__dead_letters WHERE queue = :queue

-- name: queue_running
-- `+queue`: not the claim index (every job of the queue) but jobs_leases (the leased ones).
SELECT count(*) FROM {ns}__jobs
WHERE lease_token IS NOT NULL AND +queue = :queue
  AND (visible_at > {now} OR attempts >= max_attempts)

-- name: queue_oldest_ready
WITH RECURSIVE p (priority) AS (
    SELECT (SELECT priority FROM {ns}__jobs WHERE queue = :queue ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}__jobs AS j
            WHERE j.queue = :queue AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL
)
SELECT {now} - min((
    SELECT visible_at FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority = p.priority AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    ORDER BY j.priority DESC, j.visible_at, j.id
    LIMIT 1))
FROM p WHERE p.priority IS NOT NULL

-- name: queue_names
WITH RECURSIVE j (queue) AS (
    SELECT (SELECT queue FROM {ns}__jobs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT n.queue FROM {ns}__jobs AS n WHERE n.queue > j.queue ORDER BY n.queue LIMIT 1)
    FROM j WHERE j.queue IS NOT NULL
), d (queue) AS (
    SELECT (SELECT queue FROM {ns}__dead_letters ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT n.queue FROM {ns}__dead_letters AS n WHERE n.queue > d.queue
            ORDER BY n.queue LIMIT 1)
    FROM d WHERE d.queue IS NOT NULL
), names (name) AS (
    SELECT name FROM {ns}__queues
    UNION SELECT queue FROM {ns}__subscriptions
    UNION SELECT queue FROM j WHERE queue IS NOT NULL
    UNION SELECT queue FROM d WHERE queue IS NOT NULL
)
SELECT n.name, coalesce(q.paused, 0)
FROM names AS n LEFT JOIN {ns}__queues AS q ON q.name = n.name
ORDER BY n.name

-- name: queue_paused
SELECT coalesce((SELECT paused FROM {ns}__queues WHERE name = :queue), 0)
