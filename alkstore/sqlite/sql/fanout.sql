-- Replace and debounce on the relay's fan-out (docs/adr/0022, addendum 2026-12-01): the
-- batch step of the subscriptions made with replace_by_key / debounce_by_key. The others
-- keep relay_insert (relay.sql), unchanged: relay_bounds names these apart.

-- name: fanout_range_fragment
-- The batch's events (:low, :high] that a replacing subscription (:queues) has not passed
-- and whose type matches one of its patterns (as relay_insert reads them).
{ns}__subscriptions AS s
LEFT JOIN {ns}__queues AS q ON q.name = s.queue
CROSS JOIN {ns}__events AS e
WHERE s.queue IN (SELECT value FROM json_each(:queues))
  AND e.position > :low AND e.position <= :high AND e.position > s.checkpoint
  AND EXISTS (SELECT 1 FROM json_each(s.events) AS p WHERE e.type GLOB p.value)

-- name: relay_release
-- The jobs a worker holds (or parked heads, docs/adr/0021) with a key of the batch give
-- it up: a newer event's job waits beside them (as release_key does for enqueue).
-- CROSS JOIN: the batch's keys in the outer loop, each one probe of the dedupe index (the
-- planner, free to choose, read the whole index of a queue it had no statistics for).
UPDATE {ns}__jobs SET dedupe_key = NULL
WHERE id IN (
    SELECT j.id
    FROM (SELECT DISTINCT s.queue, e.key FROM {fanout_range} AND e.key IS NOT NULL) AS c
    CROSS JOIN {ns}__jobs AS j ON j.queue = c.queue AND j.dedupe_key = c.key
    WHERE j.dedupe_key IS NOT NULL
      AND (j.lease_token IS NOT NULL OR j.visible_at = {parked}))

-- name: relay_replace
-- One job per event without a key, and per (queue, key) of the batch the newest event's:
-- inserted, or in the place of the waiting job with the key, which starts over with the
-- newest event (its id kept). Due replace_ms after now (a debounce window; 0: replace). A
-- job held behind its key's head stays held, with the new run time for its turn.
-- Returns (jobs written, jobs meant): one writer, so they are equal (PostgreSQL: see there).
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, max_attempts,
                        type, key, position, headers, payload, dedupe_key, grp)
SELECT c.queue, 0, {now} + c.replace_ms, {now}, coalesce(c.max_attempts, {default_max_attempts}),
       c.type, c.key, c.position, c.headers, c.payload, c.key,
       CASE WHEN c.ordered THEN c.key END
FROM (SELECT s.queue, s.replace_ms, q.max_attempts, q.ordered,
             e.type, e.key, e.position, e.headers, e.payload,
             row_number() OVER (PARTITION BY s.queue, e.key ORDER BY e.position DESC) AS newer
      FROM {fanout_range}) AS c
WHERE c.key IS NULL OR c.newer = 1
ORDER BY c.position, c.queue
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO UPDATE SET
    priority = 0,
    visible_at = CASE WHEN held_due IS NULL THEN excluded.visible_at ELSE visible_at END,
    held_due = CASE WHEN held_due IS NOT NULL THEN excluded.visible_at END,
    enqueued_at = excluded.enqueued_at, expires_at = NULL, attempts = 0,
    max_attempts = excluded.max_attempts, backoff = NULL, type = excluded.type,
    key = excluded.key, position = excluded.position, headers = excluded.headers,
    payload = excluded.payload, progress = NULL, history = '[]', claimed_for = NULL
WHERE lease_token IS NULL AND visible_at <> {parked};
SELECT changes(), changes()
