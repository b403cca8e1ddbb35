-- Queue queries of the SQLite engine. Each runs in one BEGIN IMMEDIATE
-- transaction (several statements share the named parameters). Times: epoch ms.

-- name: queue_config
SELECT max_attempts, backoff, visibility_ms, dead_retention_ms
FROM {ns}__queues WHERE name = :queue

-- name: queue_configure
INSERT INTO {ns}__queues (name, max_attempts, backoff, visibility_ms, dead_retention_ms)
VALUES (:queue, :max_attempts, :backoff, :visibility_ms, :dead_retention_ms)
ON CONFLICT (name) DO UPDATE SET
    max_attempts = excluded.max_attempts,
    backoff = excluded.backoff,
    visibility_ms = excluded.visibility_ms,
    dead_retention_ms = excluded.dead_retention_ms

-- name: enqueue
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload)
VALUES (:queue, :priority, :visible_at, :now, :expires_at,
        coalesce(:max_attempts, (SELECT max_attempts FROM {ns}__queues WHERE name = :queue), 5),
        :backoff, :dedupe_key, :type, :key, :position, :headers, :payload)
RETURNING id

-- name: enqueue_dedupe
-- With a dedupe key: a live duplicate inserts nothing (and does not abort the transaction).
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload)
VALUES (:queue, :priority, :visible_at, :now, :expires_at,
        coalesce(:max_attempts, (SELECT max_attempts FROM {ns}__queues WHERE name = :queue), 5),
        :backoff, :dedupe_key, :type, :key, :position, :headers, :payload)
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: claim
UPDATE {ns}__jobs SET
    attempts = attempts + 1,
    claimed_for = visible_at,
    visible_at = :now + :lease_ms,
    lease_ms = :lease_ms,
    lease_token = (abs(random()) % 9007199254740991) + 1,
    history = CASE WHEN lease_token IS NULL THEN history
              ELSE json_insert(history, '$[#]', json_object(
                  'attempt', attempts, 'error', 'lease expired', 'at', visible_at))
              END
WHERE id IN (
    SELECT id FROM {ns}__jobs
    WHERE queue = :queue
      AND visible_at <= :now
      AND attempts < max_attempts
      AND (expires_at IS NULL OR attempts > 0 OR expires_at > :now)
    ORDER BY priority DESC, visible_at, id
    LIMIT :n
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress

-- name: ack
DELETE FROM {ns}__jobs WHERE id = :id AND lease_token = :token RETURNING id

-- name: ack_many
DELETE FROM {ns}__jobs
WHERE (id, lease_token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))
RETURNING id

-- name: retry
UPDATE {ns}__jobs SET
    visible_at = :visible_at,
    lease_token = NULL,
    history = json_insert(history, '$[#]', json(:entry))
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: release
-- Give a claimed job back untouched: visible now, and this attempt does not count.
UPDATE {ns}__jobs SET visible_at = :now, lease_token = NULL, attempts = attempts - 1
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: heartbeat
UPDATE {ns}__jobs SET
    visible_at = :visible_at,
    progress = coalesce(:progress, progress)
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: bury
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, json_insert(history, '$[#]', json(:entry)), :reason, :now
FROM {ns}__jobs WHERE id = :id AND lease_token = :token
RETURNING id;
DELETE FROM {ns}__jobs WHERE id = :id AND lease_token = :token

-- name: sweep_expired
CREATE TEMP TABLE IF NOT EXISTS sweep_ids (id INTEGER PRIMARY KEY);
DELETE FROM temp.sweep_ids;
INSERT INTO temp.sweep_ids SELECT id FROM {ns}__jobs
WHERE expires_at <= :now AND attempts = 0 AND expires_at IS NOT NULL LIMIT :batch;
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, history, 'expired', :now
FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)
RETURNING id;
DELETE FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)

-- name: sweep_exhausted
CREATE TEMP TABLE IF NOT EXISTS sweep_ids (id INTEGER PRIMARY KEY);
DELETE FROM temp.sweep_ids;
INSERT INTO temp.sweep_ids SELECT id FROM {ns}__jobs
WHERE lease_token IS NOT NULL AND visible_at <= :now AND attempts >= max_attempts LIMIT :batch;
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload,
       json_insert(history, '$[#]', json_object(
           'attempt', attempts, 'error', 'lease expired', 'at', visible_at)),
       'lease expired', :now
FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)
RETURNING id;
DELETE FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)

-- name: sweep_retention
DELETE FROM {ns}__dead_letters WHERE id IN (
    SELECT d.id FROM {ns}__dead_letters AS d JOIN {ns}__queues AS q ON d.queue = q.name
    WHERE q.dead_retention_ms IS NOT NULL AND d.died_at <= :now - q.dead_retention_ms
    LIMIT :batch)
RETURNING id

-- name: dead_letters
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, type, key, position,
       headers, payload, history, reason, died_at
FROM {ns}__dead_letters
WHERE queue = :queue AND id > :after
ORDER BY id
LIMIT :limit

-- name: requeue
CREATE TEMP TABLE IF NOT EXISTS requeue_ids (id INTEGER PRIMARY KEY);
DELETE FROM temp.requeue_ids;
INSERT INTO temp.requeue_ids SELECT d.id FROM {ns}__dead_letters AS d
WHERE d.queue = :queue AND (:all OR d.id IN (SELECT value FROM json_each(:ids)))
  AND NOT EXISTS (SELECT 1 FROM {ns}__jobs AS j  -- a live job holds the dedupe key
                  WHERE j.queue = d.queue AND j.dedupe_key = d.dedupe_key)
  AND NOT EXISTS (  -- of dead letters sharing a dedupe key, only the oldest goes back
      SELECT 1 FROM {ns}__dead_letters AS o
      WHERE o.queue = d.queue AND o.dedupe_key = d.dedupe_key AND o.id < d.id
        AND (:all OR o.id IN (SELECT value FROM json_each(:ids))));
INSERT INTO {ns}__jobs (id, queue, priority, visible_at, enqueued_at, attempts, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload, history)
SELECT id, queue, priority, :now, enqueued_at,
       CASE WHEN :reset THEN 0 ELSE min(attempts, max_attempts - 1) END,
       max_attempts, backoff, dedupe_key, type, key, position, headers, payload, history
FROM {ns}__dead_letters WHERE id IN (SELECT id FROM temp.requeue_ids)
RETURNING id;
DELETE FROM {ns}__dead_letters WHERE id IN (SELECT id FROM temp.requeue_ids)

-- name: purge_dead
DELETE FROM {ns}__dead_letters
WHERE queue = :queue
  AND (:all OR id IN (SELECT value FROM json_each(:ids)))
  AND (:older_than IS NULL OR died_at <= :older_than)
RETURNING id

-- name: stats
WITH j AS (
    SELECT visible_at, lease_token, attempts, max_attempts,
           visible_at <= :now AND attempts < max_attempts
           AND (expires_at IS NULL OR attempts > 0 OR expires_at > :now) AS ready
    FROM {ns}__jobs WHERE queue = :queue
)
SELECT
    count(*) FILTER (WHERE ready),
    count(*) FILTER (WHERE visible_at > :now AND lease_token IS NULL),
    -- an exhausted job whose last lease ran out stays active until the sweep buries it
    count(*) FILTER (WHERE lease_token IS NOT NULL AND (visible_at > :now OR attempts >= max_attempts)),
    (SELECT count(*) FROM {ns}__dead_letters WHERE queue = :queue),
    min(visible_at) FILTER (WHERE ready)
FROM j
