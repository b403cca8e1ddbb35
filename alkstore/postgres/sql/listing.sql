-- A queue's jobs in one state, in id order (`Queue.jobs(state=...)`, docs/adr/0023): as
-- `jobs_list` (operations.sql), with a condition every job of that state meets written
-- where the planner can start from an index: `jobs_leases` for running jobs,
-- `jobs_exhausted` and `jobs_unclaimed_expiry` for expired ones, the claim index's
-- visible_at for scheduled ones. Beside a million ready jobs a page of the few running
-- ones then reads those, not the queue.

-- name: jobs_list_running
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}.jobs WHERE queue = %(queue)s AND id > %(after)s
        AND lease_token IS NOT NULL) AS s
WHERE state = 'running'
ORDER BY id
LIMIT %(limit)s

-- name: jobs_list_expired
-- Two arms, each from its index in id order: out of attempts (jobs_exhausted), and past
-- `expires` before a first claim (jobs_unclaimed_expiry); an OR of both would be a scan.
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text
FROM ((SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts,
              enqueued_at, visible_at, expires_at, dedupe_key, type, key, position, headers,
              payload, progress, history
       FROM {ns}.jobs
       WHERE queue = %(queue)s AND id > %(after)s AND attempts >= max_attempts
         AND {job_state} = 'expired'
       ORDER BY id LIMIT %(limit)s)
      UNION ALL
      (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts,
              enqueued_at, visible_at, expires_at, dedupe_key, type, key, position, headers,
              payload, progress, history
       FROM {ns}.jobs
       WHERE queue = %(queue)s AND id > %(after)s AND attempts < max_attempts
         AND expires_at IS NOT NULL AND attempts = 0 AND expires_at <= {now}
         AND {job_state} = 'expired'
       ORDER BY id LIMIT %(limit)s)) AS s
ORDER BY id
LIMIT %(limit)s

-- name: jobs_list_scheduled
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}.jobs WHERE queue = %(queue)s AND id > %(after)s
        AND visible_at > {now}) AS s
WHERE state = 'scheduled'
ORDER BY id
LIMIT %(limit)s

-- name: jobs_list_ready
SELECT id, queue, state, priority, attempts, max_attempts, enqueued_at, visible_at,
       expires_at, dedupe_key, type, key, position, headers::text, payload::text,
       progress::text, history::text
FROM (SELECT id, queue, {job_state} AS state, priority, attempts, max_attempts, enqueued_at,
             visible_at, expires_at, dedupe_key, type, key, position, headers, payload,
             progress, history
      FROM {ns}.jobs WHERE queue = %(queue)s AND id > %(after)s
        AND visible_at <= {now} AND attempts < max_attempts) AS s
WHERE state = 'ready'
ORDER BY id
LIMIT %(limit)s
