-- Replace and debounce on the relay's fan-out (docs/adr/0022, addendum 2026-12-01): the
-- batch step of the subscriptions made with replace_by_key / debounce_by_key. The others
-- keep relay_insert (relay.sql), unchanged: relay_bounds names these apart.

-- name: fanout_range_fragment
-- The batch's events (low, high] that a replacing subscription (queues) has not passed
-- and whose type matches one of its patterns (as relay_insert reads them).
{ns}.subscriptions AS s
JOIN {ns}.events AS e
  ON e.position > %(low)s AND e.position <= %(high)s AND e.position > s.checkpoint
LEFT JOIN {ns}.queues AS q ON q.name = s.queue
WHERE s.queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))
  AND EXISTS (SELECT 1 FROM unnest(s.patterns) AS p WHERE e.type LIKE p)

-- name: relay_release
-- Locks the live jobs holding a key of the batch until the batch commits (a claim skips
-- them: SKIP LOCKED), so that relay_replace finds them as they are now; those a worker
-- holds (or parked heads, docs/adr/0021) give up their key: a newer event's job waits
-- beside them (as release_key does for enqueue).
WITH c AS (SELECT DISTINCT s.queue, e.key FROM {fanout_range} AND e.key IS NOT NULL),
locked AS (
    SELECT j.id, j.lease_token, j.visible_at
    FROM c JOIN {ns}.jobs AS j ON j.queue = c.queue AND j.dedupe_key = c.key
    FOR UPDATE OF j)
UPDATE {ns}.jobs AS j SET dedupe_key = NULL FROM locked
WHERE j.id = locked.id
  AND (locked.lease_token IS NOT NULL OR locked.visible_at = {parked})

-- name: relay_replace
-- One job per event without a key, and per (queue, key) of the batch the newest event's:
-- inserted, or in the place of the waiting job with the key, which starts over with the
-- newest event (its id kept). Due replace_ms after now (a debounce window; 0: replace). A
-- job held behind its key's head stays held, with the new run time for its turn (the
-- hold trigger may have moved the proposed run time to excluded.held_due).
-- Returns (jobs written, jobs meant). Fewer written: a job with the key came in after
-- relay_release (a direct enqueue) and was claimed before this statement; the caller
-- releases and runs it again (each run writes the same rows).
WITH c AS (
    SELECT s.queue, s.replace_ms, q.max_attempts, q.ordered,
           e.type, e.key, e.position, e.headers, e.payload,
           row_number() OVER (PARTITION BY s.queue, e.key ORDER BY e.position DESC) AS newer
    FROM {fanout_range}
), meant AS (SELECT * FROM c WHERE c.key IS NULL OR c.newer = 1),
written AS (
    INSERT INTO {ns}.jobs (queue, priority, visible_at, enqueued_at, max_attempts,
                           type, key, position, headers, payload, dedupe_key, grp)
    SELECT m.queue, 0, {now} + m.replace_ms, {now},
           coalesce(m.max_attempts, {default_max_attempts}),
           m.type, m.key, m.position, m.headers, m.payload, m.key,
           CASE WHEN m.ordered THEN m.key END
    FROM meant AS m
    ORDER BY m.position, m.queue
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO UPDATE SET
        priority = 0,
        visible_at = CASE WHEN jobs.held_due IS NULL
                          THEN coalesce(excluded.held_due, excluded.visible_at)
                          ELSE jobs.visible_at END,
        held_due = CASE WHEN jobs.held_due IS NOT NULL
                        THEN coalesce(excluded.held_due, excluded.visible_at) END,
        enqueued_at = excluded.enqueued_at, expires_at = NULL, attempts = 0,
        max_attempts = excluded.max_attempts, backoff = NULL, type = excluded.type,
        key = excluded.key, position = excluded.position, headers = excluded.headers,
        payload = excluded.payload, progress = NULL, history = '[]', claimed_for = NULL
    WHERE jobs.lease_token IS NULL AND jobs.visible_at <> {parked}
    RETURNING 1
)
SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM meant)
