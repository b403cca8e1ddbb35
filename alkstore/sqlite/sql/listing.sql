-- A queue's jobs in one state, in id order (`Queue.jobs(state=...)`, docs/adr/0023): as
-- `jobs_list` (operations.sql), with a condition every job of that state meets written
-- where the planner can start from an index: `jobs_leases` for running jobs,
-- `jobs_exhausted` and `jobs_unclaimed_expiry` for expired ones, the claim index's
-- visible_at for scheduled ones. Beside a million ready jobs a page of the few running
-- ones then reads those, not the queue. (`+queue`: SQLite would take the claim index for
-- `queue = :queue`, every job of the queue, over jobs_leases.)

-- name: jobs_list_running
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers, payload, progress, history
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}__jobs WHERE +queue = :queue AND id > :after
        AND lease_token IS NOT NULL)
WHERE state = 'running'
ORDER BY id
LIMIT :limit

-- name: jobs_list_expired
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers, payload, progress, history
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}__jobs WHERE queue = :queue AND id > :after
        AND (attempts >= max_attempts
             OR (expires_at IS NOT NULL AND attempts = 0 AND expires_at <= {now})))
WHERE state = 'expired'
ORDER BY id
LIMIT :limit

-- name: jobs_list_scheduled
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers, payload, progress, history
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}__jobs WHERE queue = :queue AND id > :after
        AND visible_at > {now})
WHERE state = 'scheduled'
ORDER BY id
LIMIT :limit

-- name: jobs_list_ready
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers, payload, progress, history
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}__jobs WHERE queue = :queue AND id > :after
        AND visible_at <= {now} AND attempts < max_attempts)
WHERE state = 'ready'
ORDER BY id
LIMIT :limit
