-- Queue queries of the PostgreSQL engine. One statement each: autocommit makes
-- every operation atomic. Parameters are named; times are epoch milliseconds.

-- name: held_fragment
-- The visible_at of a job held behind its key's head in an ordered queue (docs/adr/0021,
-- migration 0008): past any real time, so no claim reads it.
9000000000000000

-- name: parked_fragment
-- The visible_at of a parked head (docs/adr/0021); held jobs are above it.
8000000000000000

-- name: queue_config
SELECT max_attempts, backoff::text, visibility_ms, dead_retention_ms, ordered, head_policy,
       concurrency, key_concurrency, rate_limit, rate_period_ms, key_rate_limit
FROM {ns}.queues WHERE name = %(queue)s

-- name: queue_configure
INSERT INTO {ns}.queues (name, max_attempts, backoff, visibility_ms, dead_retention_ms,
                         ordered, head_policy, concurrency, key_concurrency, rate_limit,
                         rate_period_ms, key_rate_limit)
VALUES (%(queue)s, %(max_attempts)s, %(backoff)s::jsonb, %(visibility_ms)s, %(dead_retention_ms)s,
        %(ordered)s, %(head_policy)s, %(limit)s, %(key_limit)s, %(rate)s, %(period)s, %(key_rate)s)
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
INSERT INTO {ns}.jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                       backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (%(queue)s, %(priority)s, coalesce(%(run_at)s::bigint, {now} + %(delay_ms)s::bigint),
        {now}, coalesce(%(expires_at)s::bigint, {now} + %(expires_ms)s::bigint),
        coalesce(%(max_attempts)s,
                 (SELECT max_attempts FROM {ns}.queues WHERE name = %(queue)s), {default_max_attempts}),
        %(backoff)s::jsonb, %(dedupe_key)s, %(type)s, %(key)s, %(position)s,
        %(headers)s::jsonb, %(payload)s::jsonb, {ordered_key})
RETURNING id

-- name: enqueue_dedupe
-- With a dedupe key: a live duplicate inserts nothing (and does not abort the transaction).
INSERT INTO {ns}.jobs (queue, priority, visible_at, enqueued_at, expires_at, max_attempts,
                       backoff, dedupe_key, type, key, position, headers, payload, grp)
VALUES (%(queue)s, %(priority)s, coalesce(%(run_at)s::bigint, {now} + %(delay_ms)s::bigint),
        {now}, coalesce(%(expires_at)s::bigint, {now} + %(expires_ms)s::bigint),
        coalesce(%(max_attempts)s,
                 (SELECT max_attempts FROM {ns}.queues WHERE name = %(queue)s), {default_max_attempts}),
        %(backoff)s::jsonb, %(dedupe_key)s, %(type)s, %(key)s, %(position)s,
        %(headers)s::jsonb, %(payload)s::jsonb, {ordered_key})
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: claim
-- Lease up to n jobs. `go`: they start now and count an attempt, or they are prefetched
-- (started = false) and count when the worker starts them (start_many); a claim that
-- mixes both is two of these (Queue.claim_many). A lapsed lease that had started records
-- "lease expired".
-- The jobs, in claim order, never reading a delayed one (docs/adr/0006, addendum of
-- 2026-12-01): for each priority level from the highest (`levels`: one probe each, at
-- most `levels` of them), its range of the claim index up to now (LATERAL); below those
-- levels, the walk of the index. PostgreSQL runs a recursive CTE only as far as it is
-- read and the arms of UNION ALL in turn, so a claim its top level fills probes no other
-- level, and LIMIT stops the rest. No ORDER BY: the nested loop over `levels` (LATERAL
-- keeps it outside), then the walk, yield the jobs in claim order.
-- One plan for every run: the queue, now and n reach the planner as sub-selects, so a
-- plan made for the values of one run is priced as the generic plan is and psycopg's
-- prepared claim keeps the generic one. Given the values, the planner priced its
-- per-run plans of a queue of delayed jobs far below the generic plan (which must guess
-- how many jobs are ready) and planned the claim again on every run, 0.5 ms; the walk
-- before this was planned on every run too (tests/integration/test_claim_plan_cache.py).
-- The jobs are updated through `id = ANY(ARRAY(...))`: a join with `next` was priced by a
-- guess of how many rows it yields. tests/contract/test_claim_plan.py pins the plan and
-- the cost, test_claim_order.py the jobs.
WITH RECURSIVE levels (priority, n) AS (
    (SELECT {top_priority}, 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}.jobs AS j
            WHERE j.queue = (SELECT %(queue)s::text) AND j.priority < l.priority
            ORDER BY j.priority DESC LIMIT 1), l.n + 1
    FROM levels AS l
    WHERE l.priority IS NOT NULL AND l.n < %(levels)s
), next AS (
    (SELECT r.id FROM levels AS l CROSS JOIN LATERAL (
        SELECT j.id FROM {ns}.jobs AS j
        WHERE j.queue = (SELECT %(queue)s::text) AND j.priority = l.priority
          AND {claim_ready}
        ORDER BY j.visible_at, j.id
        LIMIT (SELECT %(n)s::int)
        FOR UPDATE SKIP LOCKED) AS r)
    UNION ALL
    (SELECT r.id FROM (
        SELECT j.id FROM {ns}.jobs AS j
        WHERE j.queue = (SELECT %(queue)s::text) AND j.priority < (SELECT min(priority) FROM levels)
          AND {claim_ready}
        ORDER BY j.priority DESC, j.visible_at, j.id
        LIMIT (SELECT %(n)s::int)
        FOR UPDATE SKIP LOCKED) AS r)
    LIMIT (SELECT %(n)s::int)
)
{claim_update}

-- name: claim_top
-- The claim of the queue's top priority level alone: `claim` without its level probes
-- and walk, for a claimer whose last claim was filled there (alkstore/_cursor.py). Its
-- plan starts in a fraction of `claim`'s time, paid per claim. When it comes back short,
-- Queue.claim_many runs `claim` for the rest, so no ready job of a lower level waits.
WITH next AS (
    SELECT j.id FROM {ns}.jobs AS j
    WHERE j.queue = (SELECT %(queue)s::text) AND j.priority = {top_priority}
      AND {claim_ready}
    ORDER BY j.visible_at, j.id
    LIMIT (SELECT %(n)s::int)
    FOR UPDATE SKIP LOCKED
)
{claim_update}

-- name: claim_ready_fragment
-- A job of the claim's range (`j`) may be claimed: due, attempts left, not expired, and
-- not leased unless its lease lapsed (ADR 0012).
j.visible_at <= (SELECT {now})
AND j.attempts < j.max_attempts
AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > (SELECT {now}))
AND (j.lease_token IS NULL OR {up_for_lease})

-- name: claim_update_fragment
-- What a claim writes to the jobs of `next` and returns (claim, claim_from).
UPDATE {ns}.jobs AS j SET
    attempts = j.attempts + %(go)s::int,
    started = %(go)s::int::boolean,
    claimed_for = j.visible_at,
    visible_at = {now} + %(lease_ms)s,
    lease_ms = %(lease_ms)s,
    lease_token = floor(random() * 9007199254740991)::bigint + 1,
    history = CASE WHEN j.lease_token IS NULL OR NOT j.started THEN j.history
              ELSE j.history || jsonb_build_array(jsonb_build_object(
                  'attempt', j.attempts, 'error', 'lease expired', 'at', j.visible_at))
              END
WHERE j.id = ANY(ARRAY(SELECT id FROM next))
RETURNING j.id, j.queue, j.priority, j.claimed_for, j.attempts, j.max_attempts, j.backoff::text,
          j.lease_token, j.lease_ms, j.enqueued_at, j.type, j.key, j.position,
          j.headers::text, j.payload::text, j.progress::text, j.started

-- name: claim_from
-- The claim from a cursor (docs/adr/0027; SQLite's queues never run it): `from` is
-- [[priority, visible_at, id], ...], highest priority first: where in each level the
-- claimer took its last job (a job's claim-index entry). Each level's range starts after
-- it instead of at the level's start (one enqueue_many's jobs share a visible_at), and
-- no level is probed: while an old snapshot holds back vacuum, the entries of every job
-- processed since it began are still in the claim index, unremovable and unskippable,
-- and `claim` walks them all on every run (docs/performance.md, issue 13
-- item 8). Jobs behind the cursor (a transaction that committed late, a lease given back
-- early) and levels the cursor does not know are found by the next full `claim`, which
-- Queue.claim_many runs often enough (alkstore/_cursor.py). A paused queue: nothing.
WITH next AS (
    SELECT r.id FROM (SELECT (e->>0)::integer AS p, (e->>1)::bigint AS v, (e->>2)::bigint AS i
                      FROM jsonb_array_elements(%(from)s::jsonb) AS e) AS h
    CROSS JOIN LATERAL (
        SELECT j.id FROM {ns}.jobs AS j
        WHERE j.queue = (SELECT %(queue)s::text) AND j.priority = h.p
          AND (j.visible_at, j.id) > (h.v, h.i)
          AND {claim_ready}
        ORDER BY j.visible_at, j.id
        LIMIT (SELECT %(n)s::int)
        FOR UPDATE SKIP LOCKED) AS r
    WHERE {queue_open}
    LIMIT (SELECT %(n)s::int)
)
{claim_update}

-- name: ordered_key_fragment
-- A job's ordering key (docs/adr/0021): its key, when its queue is ordered.
CASE WHEN %(key)s::text IS NOT NULL
     THEN (SELECT CASE WHEN ordered THEN %(key)s::text END
           FROM {ns}.queues WHERE name = %(queue)s) END

-- name: top_priority_fragment
-- The highest priority of the queue's jobs (NULL: none): the first entry of the claim index.
-- NULL too while the queue is paused (operations.sql): then a claim reads no job.
(SELECT priority FROM {ns}.jobs WHERE queue = (SELECT %(queue)s::text) AND {queue_open}
 ORDER BY priority DESC LIMIT 1)

-- name: next_due
-- Milliseconds from now until the queue's next job falls due (<= 0: one is due now; NULL:
-- none waits), for an idle worker's timer (ADR 0008 addendum 2026-12-01). Due: a delayed
-- or retried job at visible_at, a leased one when its lease runs out and the server has
-- been up for the lease's length (the claim's rule). Jobs that can never be claimed
-- (exhausted, or expiring before they become visible) wait for nothing. One probe of the
-- claim index per priority level, at most %(levels)s of them: `more` says that further
-- levels were left out. A paused queue has no top level: nothing waits.
WITH RECURSIVE levels (priority, n) AS (
    (SELECT priority, 1 FROM {ns}.jobs WHERE queue = %(queue)s AND {queue_open}
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {ns}.jobs AS j
            WHERE j.queue = %(queue)s AND j.priority < l.priority
            ORDER BY j.priority DESC LIMIT 1), l.n + 1
    FROM levels AS l
    WHERE l.priority IS NOT NULL AND l.n <= %(levels)s
)
SELECT min(d.due) - {now}, count(*) > %(levels)s
FROM levels AS l
LEFT JOIN LATERAL (
    SELECT CASE WHEN j.lease_token IS NULL OR {up_for_lease} THEN j.visible_at
           ELSE (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint + j.lease_ms
           END AS due
    FROM {ns}.jobs AS j
    WHERE j.queue = %(queue)s AND j.priority = l.priority AND l.n <= %(levels)s
      AND j.visible_at < {parked}  -- held and parked jobs fall due at no time
      AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.attempts > 0
           OR j.expires_at > greatest(j.visible_at, {now}))
    ORDER BY j.visible_at, j.id
    LIMIT 1
) AS d ON true
WHERE l.priority IS NOT NULL

-- name: start_many
-- Prefetched jobs whose handlers started: their attempt counts now. ({by_ids}: how batch
-- statements find their jobs; `ids` and `tokens` are bigint[] literals, alkstore/_leases.py.)
UPDATE {ns}.jobs AS j SET attempts = j.attempts + 1, started = true
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS s (id, token)
WHERE {by_ids} AND j.id = s.id AND j.lease_token IS NOT DISTINCT FROM s.token AND NOT j.started
RETURNING j.id

-- name: by_ids_fragment
-- The jobs of a batch statement, found by id. The token is compared with IS NOT
-- DISTINCT FROM (it is never NULL), not `=`: `lease_token = token` implies the predicate of
-- the partial index jobs_leases, and after a vacuum that saw nothing leased its statistics
-- say it is empty; the planner then read that whole index (every leased job's entry, and
-- every dead one an old snapshot keeps) and hashed it: an ack of 100 jobs took 16-22 ms
-- instead of 0.4 under bench/bloat.py. With the ids as an array the jobs are looked up by
-- id, or read whole when the table is small (tests/integration/test_batch_plans.py).
j.id = ANY(%(ids)s::bigint[])

-- name: renew_many
-- Renew every lease a worker holds in one statement: [[id, token, lease_ms], ...]. The
-- jobs are found by id as by_ids_fragment says.
-- A lease that ran out but was not claimed again is renewed too (ADR 0012).
UPDATE {ns}.jobs AS j SET visible_at = {now} + r.lease_ms
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, (e->>2)::bigint AS lease_ms
      FROM jsonb_array_elements(%(leases)s::jsonb) AS e) AS r
WHERE j.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM jsonb_array_elements(%(leases)s::jsonb) AS e))
  AND j.id = r.id AND j.lease_token IS NOT DISTINCT FROM r.token
RETURNING j.id, j.lease_token

-- name: ack
DELETE FROM {ns}.jobs WHERE id = %(id)s AND lease_token = %(token)s RETURNING id

-- name: ack_many
DELETE FROM {ns}.jobs AS j
USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS a (id, token)
WHERE {by_ids} AND j.id = a.id AND j.lease_token IS NOT DISTINCT FROM a.token
RETURNING j.id

-- name: retry
-- The holder knows how many attempts ran (`attempts`): a start it has not flushed yet
-- counts too.
UPDATE {ns}.jobs SET
    visible_at = {now} + %(delay_ms)s,
    lease_token = NULL,
    started = false,
    attempts = %(attempts)s,
    history = history || jsonb_build_array(jsonb_build_object(
        'attempt', %(attempts)s::int, 'error', %(error)s::text, 'at', {now}))
WHERE id = %(id)s AND lease_token = %(token)s
RETURNING id

-- name: release
-- Give a claimed job back: visible after delay_ms, and an attempt that started does not
-- count (`attempts` is the holder's count without it).
UPDATE {ns}.jobs SET visible_at = {now} + %(delay_ms)s, lease_token = NULL, started = false,
    attempts = %(attempts)s
WHERE id = %(id)s AND lease_token = %(token)s
RETURNING id

-- name: heartbeat
UPDATE {ns}.jobs SET
    visible_at = {now} + %(lease_ms)s,
    progress = coalesce(%(progress)s::jsonb, progress)
WHERE id = %(id)s AND lease_token = %(token)s
RETURNING id

-- name: bury
WITH dead AS (
    DELETE FROM {ns}.jobs WHERE id = %(id)s AND lease_token = %(token)s RETURNING *
)
INSERT INTO {ns}.dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                               dedupe_key, type, key, position, headers, payload, history,
                               reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, %(attempts)s, max_attempts, backoff, dedupe_key, type,
       key, position, headers, payload,
       history || jsonb_build_array(jsonb_build_object(
           'attempt', %(attempts)s::int, 'error', %(reason)s::text, 'at', {now})),
       %(reason)s, {now}, grp
FROM dead
RETURNING id

-- name: sweep_expired
WITH dead AS (
    DELETE FROM {ns}.jobs WHERE id IN (
        SELECT id FROM {ns}.jobs
        WHERE expires_at <= {now} AND attempts = 0 AND expires_at IS NOT NULL
          AND (lease_token IS NULL OR visible_at <= {now})  -- not while prefetched
        LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING *
)
INSERT INTO {ns}.dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                               dedupe_key, type, key, position, headers, payload, history,
                               reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, history, 'expired', {now}, grp
FROM dead
RETURNING id

-- name: sweep_exhausted
-- The head of a key in an ordered queue whose policy is park (docs/adr/0021) is parked
-- instead: it stays its key's head, and the key waits for an operator.
WITH parking AS (
    SELECT name FROM {ns}.queues WHERE head_policy = 'park'
), parked AS (
    UPDATE {ns}.jobs AS j SET
        visible_at = {parked}, lease_token = NULL, started = false,
        history = CASE WHEN j.lease_token IS NULL THEN j.history
                  ELSE j.history || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'error', 'lease expired', 'at', j.visible_at)) END
    WHERE j.id IN (
        SELECT id FROM {ns}.jobs
        WHERE attempts >= max_attempts AND grp IS NOT NULL AND visible_at < {parked}
          AND (lease_token IS NULL OR (visible_at <= {now} AND {up_for_lease}))
          AND queue IN (SELECT name FROM parking)
        LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING j.id
), dead AS (
    DELETE FROM {ns}.jobs WHERE id IN (
        SELECT id FROM {ns}.jobs
        WHERE attempts >= max_attempts AND visible_at < {parked}
          AND (lease_token IS NULL OR (visible_at <= {now} AND {up_for_lease}))
          AND NOT (grp IS NOT NULL AND queue IN (SELECT name FROM parking))
        LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING *
)
INSERT INTO {ns}.dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                               dedupe_key, type, key, position, headers, payload, history,
                               reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload,
       CASE WHEN lease_token IS NULL THEN history
       ELSE history || jsonb_build_array(jsonb_build_object(
           'attempt', attempts, 'error', 'lease expired', 'at', visible_at)) END,
       CASE WHEN lease_token IS NULL THEN 'attempts exhausted' ELSE 'lease expired' END, {now}, grp
FROM dead
RETURNING id

-- name: sweep_retention
-- Dead letters past their queue's dead_retention_ms, else past %(default_ms)s (NULL:
-- kept forever). One range of the (queue, died_at) index per queue: the queues are found
-- by skipping through that index (names), so a sweep with nothing to delete reads one
-- index entry per queue, not every dead letter (docs/adr/0018).
WITH RECURSIVE names AS (
    SELECT (SELECT queue FROM {ns}.dead_letters ORDER BY queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT d.queue FROM {ns}.dead_letters AS d WHERE d.queue > n.queue
            ORDER BY d.queue LIMIT 1)
    FROM names AS n WHERE n.queue IS NOT NULL
)
DELETE FROM {ns}.dead_letters WHERE id = ANY(ARRAY(  -- by primary key, never a scan of all
    SELECT old.id
    FROM names AS n
    LEFT JOIN {ns}.queues AS q ON q.name = n.queue
    CROSS JOIN LATERAL (
        SELECT d.id FROM {ns}.dead_letters AS d
        WHERE d.queue = n.queue
          AND d.died_at <= {now} - coalesce(q.dead_retention_ms, %(default_ms)s::bigint)
        ORDER BY d.died_at  -- the (queue, died_at) index: a range, not the queue's rows
        LIMIT %(batch)s) AS old
    WHERE n.queue IS NOT NULL
    LIMIT %(batch)s))
RETURNING id

-- name: sweep_try_lock
-- Held until the end of the transaction that took it (alkstore/postgres/_engine.py).
SELECT pg_try_advisory_xact_lock(hashtext('alkstore'), hashtext('{ns}.sweep'))

-- name: dead_letters
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, type, key, position,
       headers::text, payload::text, history::text, reason, died_at
FROM {ns}.dead_letters
WHERE queue = %(queue)s AND id > %(after)s
ORDER BY id
LIMIT %(limit)s

-- name: requeue
WITH back AS (
    DELETE FROM {ns}.dead_letters AS d
    WHERE queue = %(queue)s
      AND (%(all)s OR id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint))
      AND NOT EXISTS (SELECT 1 FROM {ns}.jobs AS j  -- a live job holds the dedupe key
                      WHERE j.queue = d.queue AND j.dedupe_key = d.dedupe_key)
      AND NOT EXISTS (  -- of dead letters sharing a dedupe key, only the oldest goes back
          SELECT 1 FROM {ns}.dead_letters AS o
          WHERE o.queue = d.queue AND o.dedupe_key = d.dedupe_key AND o.id < d.id
            AND (%(all)s OR o.id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint)))
    RETURNING *
)
INSERT INTO {ns}.jobs (id, queue, priority, visible_at, enqueued_at, attempts, max_attempts,
                       backoff, dedupe_key, type, key, position, headers, payload, history, grp)
OVERRIDING SYSTEM VALUE
SELECT id, queue, priority, {now}, enqueued_at,
       CASE WHEN %(reset)s THEN 0 ELSE least(attempts, max_attempts - 1) END,
       max_attempts, backoff, dedupe_key, type, key, position, headers, payload, history, grp
FROM back
RETURNING id

-- name: purge_dead
DELETE FROM {ns}.dead_letters
WHERE queue = %(queue)s
  AND (%(all)s OR id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint))
  AND (%(older_ms)s::bigint IS NULL OR died_at <= {now} - %(older_ms)s::bigint)
RETURNING id

-- name: stats
WITH j AS (
    SELECT visible_at, lease_token, attempts, max_attempts,
           visible_at <= {now} AND attempts < max_attempts
           AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now}) AS ready
    FROM {ns}.jobs WHERE queue = %(queue)s
)
SELECT
    count(*) FILTER (WHERE ready),
    count(*) FILTER (WHERE visible_at > {now} AND lease_token IS NULL),
    -- an exhausted job whose last lease ran out stays active until the sweep buries it
    count(*) FILTER (WHERE lease_token IS NOT NULL AND (visible_at > {now} OR attempts >= max_attempts)),
    (SELECT count(*) FROM {ns}.dead_letters WHERE queue = %(queue)s),
    {now} - min(visible_at) FILTER (WHERE ready)
FROM j

-- name: bulk_start
-- A bulk enqueue's first statement (docs/adr/0013): the time of the batch, the queue's
-- default max_attempts, and those of the given dedupe keys (a JSON array) that live
-- jobs hold (the keys are given only when a COPY found one taken). Never prepared
-- (CUSTOM in _engine.py): a generic plan may scan the whole jobs table.
SELECT {now},
       coalesce((SELECT max_attempts FROM {ns}.queues WHERE name = %(queue)s), {default_max_attempts}),
       (SELECT coalesce(jsonb_agg(dedupe_key), '[]')::text FROM {ns}.jobs
        WHERE queue = %(queue)s
          AND dedupe_key IN (SELECT jsonb_array_elements_text(%(keys)s::jsonb))),
       coalesce((SELECT ordered FROM {ns}.queues WHERE name = %(queue)s), false)

-- name: bulk_id_before
-- The sequence before a bulk COPY: the COPY's rows take ids above it, in input order.
SELECT nextval('{ns}.jobs_id_seq')

-- name: bulk_id_after
SELECT currval('{ns}.jobs_id_seq')

-- name: bulk_ids
-- The ids a bulk COPY took when other sessions took ids from the sequence meanwhile (the
-- range between bulk_id_before and bulk_id_after has gaps): the rows this transaction
-- wrote in that range, found through the primary key.
SELECT id FROM {ns}.jobs
WHERE id > %(first)s AND id <= %(last)s AND xmin = pg_current_xact_id()::xid
ORDER BY id

-- name: bulk_insert
-- The rows of a bulk enqueue, absolute times (bulk_start's); ids from the identity
-- default. A dedupe key a live job holds fails it on jobs_dedupe: the batch is rolled
-- back and runs again (_bulk.py).
COPY {ns}.jobs (queue, enqueued_at, priority, visible_at, expires_at, max_attempts,
                backoff, dedupe_key, type, headers, payload) FROM STDIN

-- name: bulk_insert_grouped
-- bulk_insert for a batch with groups (docs/adr/0021): each job's key and ordering key
-- (grp: the group, in an ordered queue); the hold trigger runs for each row of the COPY.
COPY {ns}.jobs (queue, enqueued_at, priority, visible_at, expires_at, max_attempts,
                backoff, dedupe_key, type, headers, payload, key, grp) FROM STDIN


-- name: park
-- A head of an ordered queue that failed for good under the park policy (docs/adr/0021):
-- it stays its key's head, unclaimable, until `Queue.unpark`.
UPDATE {ns}.jobs SET
    visible_at = {parked},
    lease_token = NULL,
    started = false,
    attempts = %(attempts)s,
    history = history || jsonb_build_array(jsonb_build_object(
        'attempt', %(attempts)s::int, 'error', %(error)s::text, 'at', {now}))
WHERE id = %(id)s AND lease_token = %(token)s
RETURNING id

-- name: unpark
-- Release a parked key: its head is due now, with its attempts back.
UPDATE {ns}.jobs SET visible_at = {now}, attempts = 0
WHERE queue = %(queue)s AND grp = %(grp)s AND visible_at = {parked} AND held_due IS NULL
RETURNING id

-- name: drop_parked
-- Release a parked key without its head: the head goes to the dead letters, the key's
-- next job becomes the head (the promotion trigger, migration 0008).
WITH dead AS (
    DELETE FROM {ns}.jobs
    WHERE queue = %(queue)s AND grp = %(grp)s AND visible_at = {parked} AND held_due IS NULL
    RETURNING *
)
INSERT INTO {ns}.dead_letters (id, queue, priority, enqueued_at, attempts, max_attempts, backoff,
                               dedupe_key, type, key, position, headers, payload, history,
                               reason, died_at, grp)
SELECT id, queue, priority, enqueued_at, attempts, max_attempts, backoff, dedupe_key, type, key,
       position, headers, payload, history, %(reason)s, {now}, grp
FROM dead
RETURNING id

-- name: parked_keys
-- The parked keys of an ordered queue, with their heads, in key order.
SELECT grp, id FROM {ns}.jobs
WHERE queue = %(queue)s AND visible_at = {parked} AND held_due IS NULL AND grp IS NOT NULL
ORDER BY grp

-- name: claim_limited
-- The claim of a queue with limits (docs/adr/0021; the function is migration 0008's);
-- a queue without keeps `claim`.
SELECT * FROM {ns}.claim_limited(
    %(queue)s::text, %(now)s::bigint, %(lease_ms)s::bigint, %(n)s::int, %(go)s::int,
    %(scan)s::int, %(limit)s::int, %(key_limit)s::int, %(rate)s::int, %(period)s::bigint,
    %(key_rate)s::int)

-- name: claim_capped
-- The same function: it takes the lean path itself when there is no key limit.
SELECT * FROM {ns}.claim_limited(
    %(queue)s::text, %(now)s::bigint, %(lease_ms)s::bigint, %(n)s::int, %(go)s::int,
    %(scan)s::int, %(limit)s::int, %(key_limit)s::int, %(rate)s::int, %(period)s::bigint,
    %(key_rate)s::int)

-- name: count_key_starts
-- The jobs a claim_limited run just started per key (%(starts)s, [[key, n], ...]) into
-- their keys' rate windows, in the claim's transaction (docs/adr/0021), while its lock
-- is held; a key's window two periods old counts for nothing and goes (not those
-- counted here: one statement may not delete and upsert the same row).
WITH t AS (
    SELECT {now} / %(period)s::bigint * %(period)s::bigint AS ws
), starts AS (
    SELECT e->>0 AS key, (e->>1)::int AS n FROM jsonb_array_elements(%(starts)s::jsonb) AS e
), gone AS (
    DELETE FROM {ns}.key_rate_windows AS w USING t
    WHERE w.queue = %(queue)s AND w.window_start < t.ws - %(period)s::bigint
      AND w.key NOT IN (SELECT key FROM starts)
)
INSERT INTO {ns}.key_rate_windows AS w (queue, key, window_start, prev, cur)
SELECT %(queue)s, s.key, t.ws, 0, s.n FROM starts AS s, t
ON CONFLICT (queue, key) DO UPDATE SET
    prev = CASE WHEN w.window_start = excluded.window_start THEN w.prev
                WHEN w.window_start = excluded.window_start - %(period)s::bigint THEN w.cur
                ELSE 0 END,
    cur = CASE WHEN w.window_start = excluded.window_start THEN w.cur + excluded.cur
               ELSE excluded.cur END,
    window_start = excluded.window_start
