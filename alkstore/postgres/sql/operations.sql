-- What operators read and do to queues, jobs and dead letters (docs/adr/0017-operating-
-- queues.md). None of it is on a hot path; the claim's only part is queue_open below.

-- name: queue_open_fragment
-- The queue is not paused: one probe of the queues table's primary key, an InitPlan the
-- claim runs once per statement, in top_priority (queues.sql), where a paused queue has
-- no top level, so the claim reads no job; next_due reads it once too. The queue reaches
-- the planner as a sub-select, as in the claim (one generic plan).
NOT EXISTS (SELECT 1 FROM {ns}.queues WHERE name = (SELECT %(queue)s::text) AND paused)

-- name: job_state_fragment
-- A live job's state, as `stats` counts them: running (leased, or leased and exhausted
-- until the sweep buries it), scheduled (its run time is ahead), ready (claimable now),
-- or expired (unclaimable: past `expires` before its first claim, or out of attempts;
-- the next sweep dead-letters it); in an ordered queue (docs/adr/0021), held (behind its
-- key's head) or parked (a head that failed for good under the park policy).
(CASE
    WHEN lease_token IS NOT NULL AND (visible_at > {now} OR attempts >= max_attempts)
    THEN 'running'
    WHEN visible_at >= {parked} THEN (CASE WHEN held_due IS NULL THEN 'parked' ELSE 'held' END)
    WHEN visible_at > {now} THEN 'scheduled'
    WHEN attempts < max_attempts AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now})
    THEN 'ready'
    ELSE 'expired'
END)

-- name: queues_overview
-- Every queue: declared, subscribed, or only holding jobs or dead letters (one scan of
-- each table), in name order (bytewise, as on SQLite).
WITH j AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready') AS ready,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(visible_at) FILTER (WHERE state = 'ready') AS oldest
    FROM (SELECT queue, visible_at, {job_state} AS state FROM {ns}.jobs) AS s
    GROUP BY queue
), d AS (
    SELECT queue, count(*) AS dead FROM {ns}.dead_letters GROUP BY queue
), names (name) AS (
    SELECT name FROM {ns}.queues
    UNION SELECT queue FROM {ns}.subscriptions WHERE sink IS NULL  -- not a sink (ADR 0026)
    UNION SELECT queue FROM j
    UNION SELECT queue FROM d
)
SELECT n.name, coalesce(q.paused, false), coalesce(j.ready, 0), coalesce(j.scheduled, 0),
       coalesce(j.running, 0), coalesce(d.dead, 0), {now} - j.oldest
FROM names AS n
LEFT JOIN j ON j.queue = n.name
LEFT JOIN d ON d.queue = n.name
LEFT JOIN {ns}.queues AS q ON q.name = n.name
ORDER BY n.name COLLATE "C"

-- name: queue_info
SELECT coalesce((SELECT paused FROM {ns}.queues WHERE name = %(queue)s), false),
       count(*) FILTER (WHERE state = 'ready'),
       count(*) FILTER (WHERE state = 'scheduled'),
       count(*) FILTER (WHERE state = 'running'),
       (SELECT count(*) FROM {ns}.dead_letters WHERE queue = %(queue)s),
       {now} - min(visible_at) FILTER (WHERE state = 'ready')
FROM (SELECT visible_at, {job_state} AS state FROM {ns}.jobs WHERE queue = %(queue)s) AS s

-- name: queue_pause
-- A queue no row declares gets one, with the defaults (given), so that it can be paused.
INSERT INTO {ns}.queues (name, max_attempts, backoff, visibility_ms, paused)
VALUES (%(queue)s, {default_max_attempts}, %(backoff)s::jsonb, %(visibility_ms)s, true)
ON CONFLICT (name) DO UPDATE SET paused = true

-- name: queue_resume
UPDATE {ns}.queues SET paused = false WHERE name = %(queue)s AND paused RETURNING name

-- name: jobs_list
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             CASE WHEN visible_at >= {parked} THEN coalesce(held_due, claimed_for, enqueued_at) ELSE visible_at END AS visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}.jobs WHERE queue = %(queue)s AND id > %(after)s) AS s
WHERE %(state)s::text IS NULL OR state = %(state)s::text
ORDER BY id
LIMIT %(limit)s

-- name: job_get
-- A job by id wherever it is: live (with its state) or dead (with reason and died_at).
SELECT id, queue, {job_state}, priority, attempts, max_attempts, enqueued_at,
       CASE WHEN visible_at >= {parked} THEN coalesce(held_due, claimed_for, enqueued_at) ELSE visible_at END, expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text, NULL::text, NULL::bigint
FROM {ns}.jobs WHERE id = %(id)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
UNION ALL
SELECT id, queue, 'dead', priority, attempts, max_attempts, enqueued_at, NULL, NULL,
       dedupe_key, type, key, position, headers::text, payload::text, NULL, history::text,
       reason, died_at
FROM {ns}.dead_letters
WHERE id = %(id)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)

-- name: job_cancel
DELETE FROM {ns}.jobs
WHERE id = %(id)s AND queue = %(queue)s AND (%(force)s::boolean OR {job_state} <> 'running')
RETURNING id

-- name: job_retry
-- Claimable now: never later than it was, an expiry that passed is lifted and a job out of
-- attempts gets one more. A held job (docs/adr/0021) stays behind its key's head, due now
-- when its turn comes; a parked head is released.
UPDATE {ns}.jobs SET
    visible_at = CASE WHEN held_due IS NULL THEN least(visible_at, {now}) ELSE visible_at END,
    held_due = least(held_due, {now}),
    attempts = least(attempts, max_attempts - 1),
    expires_at = CASE WHEN attempts = 0 AND expires_at <= {now} THEN NULL ELSE expires_at END
WHERE id = %(id)s AND queue = %(queue)s AND {job_state} <> 'running'
RETURNING id

-- name: jobs_last_id
SELECT coalesce(max(id), 0) FROM {ns}.jobs

-- name: jobs_purge
-- One batch of a purge: waiting jobs (all, or those in :state) with ids in (after, last];
-- a job a claim holds the row of is left to it.
DELETE FROM {ns}.jobs WHERE id IN (
    SELECT id FROM {ns}.jobs
    WHERE queue = %(queue)s AND id > %(after)s AND id <= %(last)s
      AND {job_state} <> 'running'
      AND (%(state)s::text IS NULL OR {job_state} = %(state)s::text)
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED)
RETURNING id

-- name: dead_page
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, type, key, position,
       headers::text, payload::text, history::text, reason, died_at
FROM {ns}.dead_letters
WHERE queue = %(queue)s AND id > %(after)s
  AND died_at >= %(since)s::bigint AND died_at <= %(until)s::bigint
ORDER BY id
LIMIT %(limit)s

-- name: dead_reasons
-- A bulk operation's selection, a page at a time: ids and reasons only.
SELECT id, reason FROM {ns}.dead_letters
WHERE queue = %(queue)s AND id > %(after)s
  AND died_at >= %(since)s::bigint AND died_at <= %(until)s::bigint
ORDER BY id
LIMIT %(limit)s

-- name: dead_count
SELECT count(*) FROM {ns}.dead_letters
WHERE queue = %(queue)s AND died_at >= %(since)s::bigint AND died_at <= %(until)s::bigint
