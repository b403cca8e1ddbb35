-- Queue queries of the SQLite engine. Each runs in one BEGIN IMMEDIATE
-- transaction (several statements share the named parameters). Times: epoch ms.

-- name: held_fragment
-- The visible_at of a job held behind its key's head in an ordered queue (docs/adr/0021,
-- migration 0008): past any real time, so no claim reads it.
9000000000000000

-- name: parked_fragment
-- The visible_at of a parked head (docs/adr/0021); held jobs are above it.
8000000000000000

-- name: queue_config
SELECT max_attempts, backoff, visibility_ms, dead_retention_ms, ordered, head_policy,
       concurrency, key_concurrency, rate_limit, rate_period_ms, key_rate_limit
FROM {ns}__queues WHERE name = :queue

-- name: queue_configure
INSERT INTO {ns}__queues (name, max_attempts, backoff, visibility_ms, dead_retention_ms,
                          ordered, head_policy, concurrency, key_concurrency, rate_limit,
                          rate_period_ms, key_rate_limit)
VALUES (:queue, :max_attempts, :backoff, :visibility_ms, :dead_retention_ms,
        :ordered, :head_policy, :limit, :key_limit, :rate, :period, :key_rate)
ON CONFLICT (name) DO UPDATE SET
    key_rate_limit = excluded.key_rate_limit,
    concurrency = excluded.concurrency,
    key_concurrency = excluded.key_concurrency,
    rate_limit = excluded.rate_limit,
    rate_period_ms = excluded.rate_period_ms,
    ordered = excluded.ordered,
    head_policy = excluded.head_policy,
    max_attempts = excluded.max_attempts,
    backoff = excluded.backoff,
    visibility_ms = excluded.visibility_ms,
    dead_retention_ms = excluded.dead_retention_ms

-- name: enqueue
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (:queue, :priority, coalesce(:run_at, {now} + :delay_ms), {now},
        coalesce(:expires_at, {now} + :expires_ms),
        coalesce(:max_attempts, (SELECT max_attempts FROM {ns}__queues WHERE name = :queue), {default_max_attempts}),
        :backoff, :dedupe_key, :type, :key, :position, :headers, :payload,
        {ordered_key})
RETURNING id

-- name: enqueue_dedupe
-- With a dedupe key: a live duplicate inserts nothing (and does not abort the transaction).
INSERT INTO {ns}__jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (:queue, :priority, coalesce(:run_at, {now} + :delay_ms), {now},
        coalesce(:expires_at, {now} + :expires_ms),
        coalesce(:max_attempts, (SELECT max_attempts FROM {ns}__queues WHERE name = :queue), {default_max_attempts}),
        :backoff, :dedupe_key, :type, :key, :position, :headers, :payload,
        {ordered_key})
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: claim
-- Lease up to n jobs. `go` (0 or 1): they start now and count an attempt, or they are
-- prefetched (started = 0) and count when the worker starts them (start_many); a claim
-- that mixes both is two of these (Queue.claim_many). A lapsed lease that had started
-- records "lease expired".
-- The jobs, in claim order, never reading a delayed one (docs/adr/0006, addendum of
-- 2026-12-01): the top priority level's range of the claim index, up to now; only if
-- that leaves the claim short, the same range of each lower level (`levels`: one probe
-- each, at most :levels levels in all); below those, the walk of the index. No ORDER BY:
-- the arms run in turn (the nested loop keeps `levels` outside: CROSS JOIN), each yields
-- its jobs in claim order, and LIMIT keeps the first n. SQLite computes `levels` where
-- the second arm starts, so a claim its top level fills probes no other level.
-- tests/contract/test_claim_plan.py pins the plan and the cost, test_claim_order.py the jobs.
{claim_update}
WHERE id IN (
    WITH RECURSIVE levels (priority, n) AS (
        SELECT (SELECT j.priority FROM {ns}__jobs AS j
                WHERE j.queue = :queue AND j.priority < {top_priority}
                ORDER BY j.priority DESC LIMIT 1), 2
        UNION ALL
        SELECT (SELECT j.priority FROM {ns}__jobs AS j
                WHERE j.queue = :queue AND j.priority < l.priority
                ORDER BY j.priority DESC LIMIT 1), l.n + 1
        FROM levels AS l
        WHERE l.priority IS NOT NULL AND l.n < :levels
    )
    SELECT j.id FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority = {top_priority} AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    UNION ALL
    SELECT j.id FROM levels AS l CROSS JOIN {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority = l.priority AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    UNION ALL
    SELECT j.id FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority < (SELECT min(priority) FROM levels)
      AND +j.visible_at <= {now}  -- "+": a filter; the index serves queue and the order
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    LIMIT :n
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress, started

-- name: claim_top
-- The claim of the top priority level's range alone (the first arm of `claim`), for a
-- claimer whose last claim was filled there (alkstore/_cursor.py). SQLite's queues never
-- use it (its `claim` probes no other level when the top one fills it); it is here so
-- that both engines run the same statements, and tests/contract/test_claim_from.py holds
-- both to it.
{claim_update}
WHERE id IN (
    SELECT j.id FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND j.priority = {top_priority} AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    LIMIT :n
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress, started

-- name: claim_from
-- The claim from a cursor (docs/adr/0027): `from` is [[priority, visible_at, id], ...],
-- highest priority first; each level's range of the claim index starts after that entry.
-- SQLite's queues never use it (a deleted row's index entries go with it, so a full
-- claim has nothing to walk past); it is here so that both engines run the same
-- statements, and tests/contract/test_claim_from.py holds both to it.
{claim_update}
WHERE id IN (
    SELECT j.id FROM json_each(:from) AS h CROSS JOIN {ns}__jobs AS j
    WHERE {queue_open} AND j.queue = :queue AND j.priority = h.value ->> 0
      AND (j.visible_at, j.id) > (h.value ->> 1, h.value ->> 2) AND j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
    LIMIT :n
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress, started

-- name: claim_update_fragment
-- What a claim writes to the jobs it takes (claim, claim_from).
UPDATE {ns}__jobs SET
    attempts = attempts + :go,
    started = :go,
    claimed_for = visible_at,
    visible_at = {now} + :lease_ms,
    lease_ms = :lease_ms,
    lease_token = (abs(random()) % 9007199254740991) + 1,
    history = CASE WHEN lease_token IS NULL OR NOT started THEN history
              ELSE json_insert(history, '$[#]', json_object(
                  'attempt', attempts, 'error', 'lease expired', 'at', visible_at))
              END

-- name: ordered_key_fragment
-- A job's ordering key (docs/adr/0021): its key, when its queue is ordered.
CASE WHEN :key IS NOT NULL THEN (SELECT CASE WHEN ordered THEN :key END
                                 FROM {ns}__queues WHERE name = :queue) END

-- name: top_priority_fragment
-- The highest priority of the queue's jobs (NULL: none): the first entry of the claim index.
-- NULL too while the queue is paused (operations.sql): then a claim reads no job. (In the
-- LIMIT, read once before the index is: SQLite tests a sub-select in WHERE on every row.)
(SELECT priority FROM {ns}__jobs WHERE queue = :queue
 ORDER BY priority DESC LIMIT ({queue_open}))

-- name: next_due
-- Milliseconds from now until the queue's next job falls due (<= 0: one is due now; NULL:
-- none waits), for an idle worker's timer (ADR 0008 addendum 2026-12-01). Due: a delayed
-- or retried job, and a leased one when its lease runs out, at visible_at. Jobs that can
-- never be claimed (exhausted, or expiring before they become visible) wait for nothing.
-- One probe of the claim index per priority level, at most :levels of them: `more` says
-- that further levels were left out. A paused queue has no top level: nothing waits.
WITH RECURSIVE levels (priority, n) AS (
    SELECT {top_priority}, 1
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}__jobs AS j
            WHERE j.queue = :queue AND j.priority < l.priority
            ORDER BY j.priority DESC LIMIT 1), l.n + 1
    FROM levels AS l
    WHERE l.priority IS NOT NULL AND l.n <= :levels
)
SELECT min(CASE WHEN l.n <= :levels THEN (
           SELECT j.visible_at FROM {ns}__jobs AS j
           WHERE j.queue = :queue AND j.priority = l.priority
             AND j.visible_at < {parked}  -- held and parked jobs fall due at no time
             AND j.attempts < j.max_attempts
             AND (j.expires_at IS NULL OR j.attempts > 0
                  OR j.expires_at > max(j.visible_at, {now}))
           ORDER BY j.visible_at, j.id
           LIMIT 1) END) - {now},
       count(*) > :levels
FROM levels AS l
WHERE l.priority IS NOT NULL

-- name: start_many
-- Prefetched jobs whose handlers started: their attempt counts now.
UPDATE {ns}__jobs SET attempts = attempts + 1, started = 1
WHERE (id, lease_token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))
  AND NOT started
RETURNING id

-- name: renew_many
-- Renew every lease a worker holds in one statement: [[id, token, lease_ms], ...].
-- A lease that ran out but was not claimed again is renewed too (ADR 0012).
UPDATE {ns}__jobs AS j SET visible_at = {now} + r.lease_ms
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS lease_ms
      FROM json_each(:leases)) AS r
WHERE j.id = r.id AND j.lease_token = r.token
RETURNING id, lease_token

-- name: ack
DELETE FROM {ns}__jobs WHERE id = :id AND lease_token = :token RETURNING id

-- name: ack_many
DELETE FROM {ns}__jobs
WHERE (id, lease_token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))
RETURNING id

-- name: retry
-- The holder knows how many attempts ran (`attempts`): a start it has not flushed yet
-- counts too.
UPDATE {ns}__jobs SET
    visible_at = {now} + :delay_ms,
    lease_token = NULL,
    started = 0,
    attempts = :attempts,
    history = json_insert(history, '$[#]', json_object(
        'attempt', :attempts, 'error', :error, 'at', {now}))
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: release
-- Give a claimed job back: visible after delay_ms, and an attempt that started does not
-- count (`attempts` is the holder's count without it).
UPDATE {ns}__jobs SET visible_at = {now} + :delay_ms, lease_token = NULL, started = 0,
    attempts = :attempts
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: heartbeat
UPDATE {ns}__jobs SET
    visible_at = {now} + :lease_ms,
    progress = coalesce(:progress, progress)
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: bury
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, :attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload,
       json_insert(history, '$[#]', json_object('attempt', :attempts, 'error', :reason,
                                                'at', {now})),
       :reason, {now}, grp
FROM {ns}__jobs WHERE id = :id AND lease_token = :token
RETURNING id;
DELETE FROM {ns}__jobs WHERE id = :id AND lease_token = :token

-- name: sweep_expired
CREATE TEMP TABLE IF NOT EXISTS sweep_ids (id INTEGER PRIMARY KEY);
DELETE FROM temp.sweep_ids;
INSERT INTO temp.sweep_ids SELECT id FROM {ns}__jobs
WHERE expires_at <= {now} AND attempts = 0 AND expires_at IS NOT NULL
  AND (lease_token IS NULL OR visible_at <= {now})  -- not while prefetched
LIMIT :batch;
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, history, 'expired', {now}, grp
FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)
RETURNING id;
DELETE FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)

-- name: sweep_exhausted
-- The head of a key in an ordered queue whose policy is park (docs/adr/0021) is parked
-- instead: it stays its key's head, and the key waits for an operator.
UPDATE {ns}__jobs SET
    visible_at = {parked}, lease_token = NULL, started = 0,
    history = CASE WHEN lease_token IS NULL THEN history
              ELSE json_insert(history, '$[#]', json_object(
                  'attempt', attempts, 'error', 'lease expired', 'at', visible_at)) END
WHERE id IN (
    SELECT id FROM {ns}__jobs
    WHERE attempts >= max_attempts AND (lease_token IS NULL OR visible_at <= {now})
      AND grp IS NOT NULL AND visible_at < {parked}
      AND queue IN (SELECT name FROM {ns}__queues WHERE head_policy = 'park')
    LIMIT :batch);
CREATE TEMP TABLE IF NOT EXISTS sweep_ids (id INTEGER PRIMARY KEY);
DELETE FROM temp.sweep_ids;
INSERT INTO temp.sweep_ids SELECT id FROM {ns}__jobs
WHERE attempts >= max_attempts AND (lease_token IS NULL OR visible_at <= {now})
  AND visible_at < {parked} LIMIT :batch;
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload,
       CASE WHEN lease_token IS NULL THEN history
       ELSE json_insert(history, '$[#]', json_object(
           'attempt', attempts, 'error', 'lease expired', 'at', visible_at)) END,
       CASE WHEN lease_token IS NULL THEN 'attempts exhausted' ELSE 'lease expired' END, {now}, grp
FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)
RETURNING id;
DELETE FROM {ns}__jobs WHERE id IN (SELECT id FROM temp.sweep_ids)

-- name: sweep_retention
-- Dead letters past their queue's dead_retention_ms, else past :default_ms (NULL: kept
-- forever). One range of the (queue, died_at) index per queue: the queues are found by
-- skipping through that index (names), so a sweep with nothing to delete reads one
-- index entry per queue, not every dead letter (docs/adr/0018).
WITH RECURSIVE names(queue) AS (
    SELECT (SELECT queue FROM {ns}__dead_letters ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM {ns}__dead_letters AS d WHERE d.queue > names.queue
            ORDER BY d.queue LIMIT 1)
    FROM names WHERE names.queue IS NOT NULL
), cut AS (
    SELECT n.queue, {now} - coalesce(q.dead_retention_ms, :default_ms) AS before
    FROM names AS n LEFT JOIN {ns}__queues AS q ON q.name = n.queue
    WHERE n.queue IS NOT NULL
)
DELETE FROM {ns}__dead_letters WHERE id IN (
    SELECT d.id FROM cut CROSS JOIN {ns}__dead_letters AS d
    WHERE d.queue = cut.queue AND d.died_at <= cut.before
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
                        backoff, dedupe_key, type, key, position, headers, payload, history,
                        grp)
SELECT id, queue, priority, {now}, enqueued_at,
       CASE WHEN :reset THEN 0 ELSE min(attempts, max_attempts - 1) END,
       max_attempts, backoff, dedupe_key, type, key, position, headers, payload, history, grp
FROM {ns}__dead_letters WHERE id IN (SELECT id FROM temp.requeue_ids)
RETURNING id;
DELETE FROM {ns}__dead_letters WHERE id IN (SELECT id FROM temp.requeue_ids)

-- name: purge_dead
DELETE FROM {ns}__dead_letters
WHERE queue = :queue
  AND (:all OR id IN (SELECT value FROM json_each(:ids)))
  AND (:older_ms IS NULL OR died_at <= {now} - :older_ms)
RETURNING id

-- name: stats
WITH j AS (
    SELECT visible_at, lease_token, attempts, max_attempts,
           visible_at <= {now} AND attempts < max_attempts
           AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now}) AS ready
    FROM {ns}__jobs WHERE queue = :queue
)
SELECT
    count(*) FILTER (WHERE ready),
    count(*) FILTER (WHERE visible_at > {now} AND lease_token IS NULL),
    -- an exhausted job whose last lease ran out stays active until the sweep buries it
    count(*) FILTER (WHERE lease_token IS NOT NULL AND (visible_at > {now} OR attempts >= max_attempts)),
    (SELECT count(*) FROM {ns}__dead_letters WHERE queue = :queue),
    {now} - min(visible_at) FILTER (WHERE ready)
FROM j

-- name: bulk_start
-- A bulk enqueue's first statement (docs/adr/0013): the time of the batch, the queue's
-- default max_attempts, those of the given dedupe keys (a JSON array) that live
-- jobs hold (the keys are given only when an insert found one taken), and whether the
-- queue is ordered (a batch with groups: docs/adr/0021).
SELECT {now},
       coalesce((SELECT max_attempts FROM {ns}__queues WHERE name = :queue), {default_max_attempts}),
       (SELECT json_group_array(dedupe_key) FROM {ns}__jobs
        WHERE queue = :queue AND dedupe_key IN (SELECT value FROM json_each(:keys))),
       coalesce((SELECT ordered FROM {ns}__queues WHERE name = :queue), 0)

-- name: bulk_insert
-- One job of a bulk enqueue, run with executemany: absolute times (bulk_start's). A
-- dedupe key a live job holds fails it (the batch is rolled back and runs again,
-- _bulk.py). Positional parameters: nothing to look up per row.
INSERT INTO {ns}__jobs (queue, enqueued_at, priority, visible_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, headers, payload)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
RETURNING id

-- name: bulk_insert_grouped
-- bulk_insert for a batch with groups (docs/adr/0021): each job's key and ordering key
-- (grp: the group, in an ordered queue), which the hold trigger orders behind the key's
-- older jobs, rows of the batch included.
INSERT INTO {ns}__jobs (queue, enqueued_at, priority, visible_at, expires_at, max_attempts,
                        backoff, dedupe_key, type, headers, payload, key, grp)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
RETURNING id


-- name: park
-- A head of an ordered queue that failed for good under the park policy (docs/adr/0021):
-- it stays its key's head, unclaimable, until `Queue.unpark`.
UPDATE {ns}__jobs SET
    visible_at = {parked},
    lease_token = NULL,
    started = 0,
    attempts = :attempts,
    history = json_insert(history, '$[#]', json_object(
        'attempt', :attempts, 'error', :error, 'at', {now}))
WHERE id = :id AND lease_token = :token
RETURNING id

-- name: unpark
-- Release a parked key: its head is due now, with its attempts back.
UPDATE {ns}__jobs SET visible_at = {now}, attempts = 0
WHERE queue = :queue AND grp = :grp AND visible_at = {parked} AND held_due IS NULL
RETURNING id

-- name: drop_parked
-- Release a parked key without its head: the head goes to the dead letters, the key's
-- next job becomes the head (the promotion trigger, migration 0008).
INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                                dedupe_key, type, key, position, headers, payload, history,
                                reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, history, :reason, {now}, grp
FROM {ns}__jobs
WHERE queue = :queue AND grp = :grp AND visible_at = {parked} AND held_due IS NULL
RETURNING id;
DELETE FROM {ns}__jobs
WHERE queue = :queue AND grp = :grp AND visible_at = {parked} AND held_due IS NULL

-- name: parked_keys
-- The parked keys of an ordered queue, with their heads, in key order.
SELECT grp, id FROM {ns}__jobs
WHERE queue = :queue AND visible_at = {parked} AND held_due IS NULL AND grp IS NOT NULL
ORDER BY grp

-- name: claim_limited
-- The claim of a queue with limits (docs/adr/0021); a queue without keeps `claim`. One
-- writer at a time (BEGIN IMMEDIATE), so the counts below are the truth when the jobs
-- are leased. Running: the queue's live leases (the jobs_leases index: every lease in
-- the database that has not run out, the queue's picked among them). The candidates:
-- the first :scan claimable jobs in claim order (the walk of the claim index) whose key
-- is not already at its limit (`at_limit`: else a hot key's waiting jobs fill the scan and
-- hide every other key's, tests/contract/test_key_limits.py); of them, in claim order, those whose key is under :key_limit (and :key_rate) counting
-- the ones before them, at most :n, what :limit leaves and what the rate window leaves. Then the rate
-- window counts what was claimed (changes(): the rows of the UPDATE); with a :key_rate,
-- count_key_starts counts each claimed key's in the same transaction (_ordering.py).
{claim_update}
WHERE id IN (
    WITH t AS MATERIALIZED (  -- the time and the rate window once (and a shorter text)
        SELECT {now} AS now, ({now} / :period) * :period AS ws
    ), running AS MATERIALIZED (  -- once per claim, not once per candidate
        SELECT r.key, count(*) AS n FROM {ns}__jobs AS r INDEXED BY {ns}__jobs_leases
        WHERE r.lease_token IS NOT NULL AND r.visible_at > (SELECT now FROM t) AND r.queue = :queue
        GROUP BY r.key
    ), used AS (  -- the rate windows' starts in the sliding period: the queue's (key NULL)
        SELECT w.key, CASE  -- and, with :key_rate, each key's
            WHEN w.window_start = t.ws
            THEN w.prev * (:period - (t.now - t.ws)) * 1.0 / :period + w.cur
            WHEN w.window_start = t.ws - :period
            THEN w.cur * (:period - (t.now - t.ws)) * 1.0 / :period
            ELSE 0 END AS n
        FROM t, (SELECT NULL AS key, window_start, prev, cur FROM {ns}__rate_windows
                 WHERE queue = :queue
                 UNION ALL
                 SELECT key, window_start, prev, cur FROM {ns}__key_rate_windows
                 WHERE queue = :queue AND :key_rate IS NOT NULL) AS w
    ), at_limit AS MATERIALIZED (  -- keys at their limit: their jobs are not candidates
        SELECT key FROM running WHERE key IS NOT NULL AND n >= :key_limit
        UNION
        SELECT key FROM used WHERE key IS NOT NULL AND n > :key_rate - 1
    ), cand AS (
        SELECT c.id, c.key, c.priority, c.visible_at,
               row_number() OVER (PARTITION BY c.key
                                  ORDER BY c.priority DESC, c.visible_at, c.id) AS rk
        FROM (SELECT j.id, j.key, j.priority, j.visible_at FROM {ns}__jobs AS j
              WHERE j.queue = :queue AND +j.visible_at <= (SELECT now FROM t)
                AND j.attempts < j.max_attempts
                AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > (SELECT now FROM t))
                AND {queue_open}
                AND (j.key IS NULL OR j.key NOT IN (SELECT key FROM at_limit))
              ORDER BY j.priority DESC, j.visible_at, j.id
              LIMIT :scan) AS c
    )
    SELECT c.id FROM cand AS c
    LEFT JOIN running AS r ON r.key = c.key
    LEFT JOIN used AS k ON k.key = c.key
    WHERE c.key IS NULL
       OR ((:key_limit IS NULL OR c.rk + coalesce(r.n, 0) <= :key_limit)
           AND (:key_rate IS NULL OR c.rk <= :key_rate - coalesce(k.n, 0)))
    ORDER BY c.priority DESC, c.visible_at, c.id
    LIMIT max(0, min(:n,
                     coalesce(:limit - (SELECT coalesce(sum(n), 0) FROM running), :n),
                     coalesce(CAST(:rate - coalesce((SELECT n FROM used WHERE key IS NULL), 0)
                                   AS INTEGER), :n)))
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress, started;
INSERT INTO {ns}__rate_windows (queue, window_start, prev, cur)
SELECT :queue, ({now} / :period) * :period, 0, changes() WHERE :rate IS NOT NULL
ON CONFLICT (queue) DO UPDATE SET
    prev = CASE WHEN window_start = excluded.window_start THEN prev
                WHEN window_start = excluded.window_start - :period THEN cur
                ELSE 0 END,
    cur = CASE WHEN window_start = excluded.window_start THEN cur + excluded.cur
               ELSE excluded.cur END,
    window_start = excluded.window_start

-- name: claim_capped
-- claim_limited without a key limit (docs/adr/0021): the plain walk of the claim index
-- in claim order, as many as the queue's limit and the rate window leave (LIMIT is
-- computed once). Running: the live leases of the whole database (the jobs_leases
-- index, forced: the planner's choice, the claim index, reads every job of the queue).
{claim_update}
WHERE id IN (
    SELECT j.id FROM {ns}__jobs AS j
    WHERE j.queue = :queue AND +j.visible_at <= {now}
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > {now})
      AND {queue_open}
    ORDER BY j.priority DESC, j.visible_at, j.id
    LIMIT max(0, min(:n,
        coalesce(:limit - (SELECT count(*) FROM {ns}__jobs AS r INDEXED BY {ns}__jobs_leases
                           WHERE r.lease_token IS NOT NULL AND r.visible_at > {now}
                             AND r.queue = :queue), :n),
        coalesce(CAST(:rate - coalesce((
            SELECT CASE
                WHEN w.window_start = ({now} / :period) * :period
                THEN w.prev * (:period - ({now} - w.window_start)) * 1.0 / :period + w.cur
                WHEN w.window_start = ({now} / :period) * :period - :period
                THEN w.cur * (:period - ({now} - w.window_start - :period)) * 1.0 / :period
                ELSE 0 END
            FROM {ns}__rate_windows AS w WHERE w.queue = :queue), 0) AS INTEGER), :n)))
)
RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token, lease_ms,
          enqueued_at, type, key, position, headers, payload, progress, started;
INSERT INTO {ns}__rate_windows (queue, window_start, prev, cur)
SELECT :queue, ({now} / :period) * :period, 0, changes() WHERE :rate IS NOT NULL
ON CONFLICT (queue) DO UPDATE SET
    prev = CASE WHEN window_start = excluded.window_start THEN prev
                WHEN window_start = excluded.window_start - :period THEN cur
                ELSE 0 END,
    cur = CASE WHEN window_start = excluded.window_start THEN cur + excluded.cur
               ELSE excluded.cur END,
    window_start = excluded.window_start

-- name: count_key_starts
-- The jobs a claim_limited run just started per key (:starts, [[key, n], ...]) into their
-- keys' rate windows, in the claim's transaction (docs/adr/0021); a key's window two
-- periods old counts for nothing and goes.
DELETE FROM {ns}__key_rate_windows
WHERE queue = :queue AND window_start < ({now} / :period) * :period - :period;
INSERT INTO {ns}__key_rate_windows (queue, key, window_start, prev, cur)
SELECT :queue, json_extract(value, '$[0]'), ({now} / :period) * :period, 0,
       json_extract(value, '$[1]')
FROM json_each(:starts) WHERE true
ON CONFLICT (queue, key) DO UPDATE SET
    prev = CASE WHEN window_start = excluded.window_start THEN prev
                WHEN window_start = excluded.window_start - :period THEN cur
                ELSE 0 END,
    cur = CASE WHEN window_start = excluded.window_start THEN cur + excluded.cur
               ELSE excluded.cur END,
    window_start = excluded.window_start
