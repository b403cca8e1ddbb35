-- Cancel by dedupe key, the lease check and debounce / replace (docs/adr/0022).

-- name: job_by_key
-- The live job holding a dedupe key in a queue (one probe of the dedupe index).
SELECT id FROM {ns}__jobs WHERE queue = :queue AND dedupe_key = :key

-- name: lease_check
-- Does this claim still hold its job? (`job.check()`: a primary-key probe.)
SELECT id FROM {ns}__jobs WHERE id = :id AND lease_token = :token

-- name: enqueue_replace
-- A dedupe key a *waiting* job holds: that job takes the new payload, options and run time
-- and starts over (attempts, history); its id is kept. A job that a worker holds (running
-- or prefetched) or a parked head (docs/adr/0021) is left alone: no row comes back (then
-- release_key, and enqueue again). A job held behind its key's head stays held, with
-- the new run time for when its turn comes (its place in the key's order is its id).
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (:queue, :priority, coalesce(:run_at, {now} + :delay_ms), {now},
        coalesce(:expires_at, {now} + :expires_ms),
        coalesce(:max_attempts, (SELECT max_attempts FROM {ns}__queues WHERE name = :queue), {default_max_attempts}),
        :backoff, :dedupe_key, :type, :key, :position, :headers, :payload, {ordered_key})
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO UPDATE SET
    priority = excluded.priority,
    visible_at = CASE WHEN held_due IS NULL THEN excluded.visible_at ELSE visible_at END,
    held_due = CASE WHEN held_due IS NOT NULL THEN excluded.visible_at END,
    enqueued_at = excluded.enqueued_at, expires_at = excluded.expires_at, attempts = 0,
    max_attempts = excluded.max_attempts, backoff = excluded.backoff, type = excluded.type,
    key = excluded.key, position = excluded.position, headers = excluded.headers,
    payload = excluded.payload, progress = NULL, history = '[]', claimed_for = NULL
WHERE lease_token IS NULL AND visible_at <> {parked} AND grp IS excluded.grp
RETURNING id

-- name: release_key
-- The job a worker holds (or a parked head) gives up its dedupe key, so that a replacing
-- job can take it (graphile-worker's job_key_mode=replace does the same).
UPDATE {ns}__jobs SET dedupe_key = NULL
WHERE queue = :queue AND dedupe_key = :dedupe_key
  AND (lease_token IS NOT NULL OR visible_at = {parked})
RETURNING id

-- name: drop_moved
-- A waiting job that holds the dedupe key in another key's order (an ordered queue, docs/adr/0021:
-- the replacing enqueue names another group). Replaced in place it would stay in the old key's
-- order, so it is deleted (the old key's next job becomes its head, as on a cancel) and the new
-- job is inserted in its own key's order.
DELETE FROM {ns}__jobs
WHERE queue = :queue AND dedupe_key = :dedupe_key AND lease_token IS NULL
  AND visible_at <> {parked} AND grp IS NOT {ordered_key}
RETURNING id

-- name: ack_fenced
-- job.transaction()'s ack (the `ack` query; PostgreSQL sends its own with COMMIT).
DELETE FROM {ns}__jobs WHERE id = :id AND lease_token = :token RETURNING id
