-- The operator's cockpit: live workers, status, the sweep's record
-- (docs/adr/0018-live-workers-status-retention.md). {ns}: the table prefix; times: epoch ms.

-- name: worker_seen
-- A worker announces itself and refreshes its row, with what it has done since it started
-- (counts, JSON or NULL; docs/adr/0023 addendum); a row the sweep aged out while the
-- worker could not reach the database comes back with its first start time.
INSERT INTO {ns}__workers (id, host, pid, queues, concurrency, started_at, last_seen, counts)
VALUES (:id, :host, :pid, :queues, :concurrency, coalesce(:started_at, {now}), {now}, :counts)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, counts = excluded.counts
RETURNING started_at

-- name: worker_leave
DELETE FROM {ns}__workers WHERE id = :id

-- name: workers_list
SELECT id, host, pid, queues, concurrency, started_at, last_seen, {now}, counts
FROM {ns}__workers ORDER BY started_at, id

-- name: sweep_workers
DELETE FROM {ns}__workers WHERE last_seen < {now} - :forget_ms RETURNING id

-- name: sweep_stamp
-- Not a lease: the row 'sweep.last' (no lease name has a dot) records the last sweep:
-- who ran it and the retention it applied (holder, JSON), how many ran (token), and
-- when (expires_at).
INSERT INTO {ns}__locks (name, holder, token, expires_at)
VALUES ('sweep.last', :holder, 1, {now})
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder, token = token + 1, expires_at = excluded.expires_at

-- name: status_locks
SELECT name, holder, token, expires_at, {now} FROM {ns}__locks
WHERE name IN ('relay', 'scheduler', 'sweep.last') ORDER BY name

-- name: status_queues
-- Every queue: declared (queues), subscribed, or reached by jobs or dead letters alone
-- (tx.enqueue), with the counts Queue.stats() gives, in one read. It counts every live
-- job and dead letter: an operator's read, not a hot path.
WITH j AS (
    SELECT queue,
           count(*) FILTER (WHERE ready) AS ready,
           count(*) FILTER (WHERE visible_at > now AND lease_token IS NULL) AS scheduled,
           count(*) FILTER (WHERE lease_token IS NOT NULL
                            AND (visible_at > now OR attempts >= max_attempts)) AS running,
           now - min(visible_at) FILTER (WHERE ready) AS oldest
    FROM (
        SELECT queue, visible_at, lease_token, attempts, max_attempts, {now} AS now,
               visible_at <= {now} AND attempts < max_attempts
               AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now}) AS ready
        FROM {ns}__jobs)
    GROUP BY queue
), d AS (
    SELECT queue, count(*) AS dead FROM {ns}__dead_letters GROUP BY queue
), names AS (
    SELECT name AS queue FROM {ns}__queues
    UNION SELECT queue FROM {ns}__subscriptions WHERE sink IS NULL  -- not a sink (ADR 0026)
    UNION SELECT queue FROM j
    UNION SELECT queue FROM d
)
SELECT n.queue, coalesce(j.ready, 0), coalesce(j.scheduled, 0), coalesce(j.running, 0),
       coalesce(d.dead, 0), j.oldest, coalesce(q.paused, 0), q.dead_retention_ms
FROM names AS n
LEFT JOIN j ON j.queue = n.queue
LEFT JOIN d ON d.queue = n.queue
LEFT JOIN {ns}__queues AS q ON q.name = n.queue
ORDER BY n.queue
