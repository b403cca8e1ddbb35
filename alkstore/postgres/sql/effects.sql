-- Cancel by dedupe key, the lease check and debounce / replace (docs/adr/0022).

-- name: job_by_key
-- The live job holding a dedupe key in a queue (one probe of jobs_dedupe).
SELECT id FROM {ns}.jobs WHERE queue = %(queue)s AND dedupe_key = %(key)s

-- name: lease_check
-- Does this claim still hold its job? (`job.check()`: a primary-key probe, no write.)
SELECT id FROM {ns}.jobs WHERE id = %(id)s AND lease_token = %(token)s

-- name: enqueue_replace
-- A dedupe key a *waiting* job holds: that job takes the new payload, options and run time
-- and starts over (attempts, history); its id is kept. A job that a worker holds (running
-- or prefetched) or a parked head (docs/adr/0021) is left alone: no row comes back (then
-- release_key, and enqueue again). A job held behind its key's head stays held, with
-- the new run time for when its turn comes (its place in the key's order is its id).
-- The hold trigger (BEFORE INSERT) may have moved the proposed row's run time to
-- held_due: coalesce(excluded.held_due, excluded.visible_at) is the new run time.
INSERT INTO {ns}.jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                       backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (%(queue)s, %(priority)s, coalesce(%(run_at)s::bigint, {now} + %(delay_ms)s::bigint),
        {now}, coalesce(%(expires_at)s::bigint, {now} + %(expires_ms)s::bigint),
        coalesce(%(max_attempts)s,
                 (SELECT max_attempts FROM {ns}.queues WHERE name = %(queue)s), {default_max_attempts}),
        %(backoff)s::jsonb, %(dedupe_key)s, %(type)s, %(key)s, %(position)s,
        %(headers)s::jsonb, %(payload)s::jsonb, {ordered_key})
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO UPDATE SET
    priority = excluded.priority,
    visible_at = CASE WHEN jobs.held_due IS NULL
                      THEN coalesce(excluded.held_due, excluded.visible_at)
                      ELSE jobs.visible_at END,
    held_due = CASE WHEN jobs.held_due IS NOT NULL
                    THEN coalesce(excluded.held_due, excluded.visible_at) END,
    enqueued_at = excluded.enqueued_at, expires_at = excluded.expires_at, attempts = 0,
    max_attempts = excluded.max_attempts, backoff = excluded.backoff, type = excluded.type,
    key = excluded.key, position = excluded.position, headers = excluded.headers,
    payload = excluded.payload, progress = NULL, history = '[]', claimed_for = NULL
WHERE jobs.lease_token IS NULL AND jobs.visible_at <> {parked}
  AND jobs.grp IS NOT DISTINCT FROM excluded.grp
RETURNING id

-- name: release_key
-- The job a worker holds (or a parked head) gives up its dedupe key, so that a replacing
-- job can take it (graphile-worker's job_key_mode=replace does the same).
UPDATE {ns}.jobs SET dedupe_key = NULL
WHERE queue = %(queue)s AND dedupe_key = %(dedupe_key)s
  AND (lease_token IS NOT NULL OR visible_at = {parked})
RETURNING id

-- name: drop_moved
-- A waiting job that holds the dedupe key in another key's order (an ordered queue, docs/adr/0021:
-- the replacing enqueue names another group). Replaced in place it would stay in the old key's
-- order, so it is deleted (the old key's next job becomes its head, as on a cancel) and the new
-- job is inserted in its own key's order.
DELETE FROM {ns}.jobs
WHERE queue = %(queue)s AND dedupe_key = %(dedupe_key)s AND lease_token IS NULL
  AND visible_at <> {parked} AND grp IS DISTINCT FROM {ordered_key}
RETURNING id

-- name: ack_fenced
-- job.transaction()'s ack, sent with COMMIT in one pipeline (no round trip of its own):
-- it fails with division_by_zero (22012) when it deletes nothing (the claim no longer
-- holds the job), so the pipeline aborts and COMMIT does not run. Nothing else in that
-- pipeline (event INSERTs) can raise 22012.
WITH gone AS (DELETE FROM {ns}.jobs WHERE id = %(id)s AND lease_token = %(token)s RETURNING 1)
SELECT 1 / count(*)::int FROM gone
