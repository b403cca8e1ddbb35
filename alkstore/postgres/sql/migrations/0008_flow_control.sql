-- Flow control (docs/adr/0021): per-key ordered delivery.
-- A queue declared `ordered` gives each job with a key (the event key of a relayed job,
-- the `group=` of a direct enqueue) that key in `grp`. Of a key's live jobs only the
-- head (the oldest) is claimable; the others are held: visible_at is the HELD sentinel
-- (9e15 ms, past any real time, so the unchanged claim never reads them) and held_due
-- keeps the run time they take when they become the head. A head that failed for good
-- under the `park` policy waits at the PARKED sentinel (8e15) until an operator releases
-- its key. Triggers keep this true on every path that adds or removes a job (enqueue,
-- relay fan-out, requeue; ack, bury, sweeps, cancel, purge).
ALTER TABLE {ns}.jobs ADD COLUMN grp text, ADD COLUMN held_due bigint;
ALTER TABLE {ns}.dead_letters ADD COLUMN grp text;
ALTER TABLE {ns}.queues ADD COLUMN ordered boolean NOT NULL DEFAULT false,
    ADD COLUMN head_policy text NOT NULL DEFAULT 'block'
        CHECK (head_policy IN ('block', 'dead_letter', 'park'));
CREATE INDEX jobs_group ON {ns}.jobs (queue, grp, id) WHERE grp IS NOT NULL;

-- One row per key with live jobs: the lock that orders the writers of one key. An
-- insert and the removal of the head take it (a row lock: no entry in the shared lock
-- table, however many keys a relay batch touches), then look at the key's jobs with a
-- fresh snapshot (each statement of a plpgsql function takes one under READ COMMITTED).
CREATE TABLE {ns}.job_groups (
    queue text NOT NULL,
    grp   text NOT NULL,
    PRIMARY KEY (queue, grp)
);

-- Both functions run with their owner's rights (as the sequencer, migration 0007): a
-- producer or a worker needs no privilege on job_groups.
CREATE FUNCTION {ns}.jobs_hold() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    LOOP
        INSERT INTO {ns}.job_groups (queue, grp) VALUES (NEW.queue, NEW.grp)
        ON CONFLICT DO NOTHING;
        PERFORM 1 FROM {ns}.job_groups WHERE queue = NEW.queue AND grp = NEW.grp FOR UPDATE;
        EXIT WHEN FOUND;  -- else the head's removal took the row away meanwhile
    END LOOP;
    IF EXISTS (SELECT 1 FROM {ns}.jobs WHERE queue = NEW.queue AND grp = NEW.grp) THEN
        NEW.held_due := NEW.visible_at;
        NEW.visible_at := 9000000000000000;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION {ns}.jobs_promote() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {ns}.job_groups WHERE queue = OLD.queue AND grp = OLD.grp FOR UPDATE;
    UPDATE {ns}.jobs SET visible_at = held_due, held_due = NULL
    WHERE id = (SELECT id FROM {ns}.jobs WHERE queue = OLD.queue AND grp = OLD.grp
                ORDER BY id LIMIT 1)
      AND held_due IS NOT NULL;
    IF NOT FOUND THEN  -- the key's last job: its row goes
        DELETE FROM {ns}.job_groups AS g WHERE g.queue = OLD.queue AND g.grp = OLD.grp
          AND NOT EXISTS (SELECT 1 FROM {ns}.jobs AS j
                          WHERE j.queue = OLD.queue AND j.grp = OLD.grp);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_hold BEFORE INSERT ON {ns}.jobs
FOR EACH ROW WHEN (NEW.grp IS NOT NULL) EXECUTE FUNCTION {ns}.jobs_hold();
CREATE TRIGGER jobs_promote AFTER DELETE ON {ns}.jobs
FOR EACH ROW WHEN (OLD.grp IS NOT NULL AND OLD.held_due IS NULL)
EXECUTE FUNCTION {ns}.jobs_promote();

-- Cluster-wide limits (docs/adr/0021), read by the claim of a limited queue only
-- (claim_limited): at most `concurrency` leases of the queue at once, at most
-- `key_concurrency` per job key, at most `rate_limit` starts per `rate_period_ms`.
-- NULL: no such limit. Leases are the slots: a crashed holder's come back when its
-- lease runs out, with nothing to clean up.
ALTER TABLE {ns}.queues
    ADD COLUMN concurrency integer CHECK (concurrency >= 1),
    ADD COLUMN key_concurrency integer CHECK (key_concurrency >= 1),
    ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
    ADD COLUMN rate_period_ms bigint CHECK (rate_period_ms >= 1),
    ADD COLUMN key_rate_limit integer CHECK (key_rate_limit >= 1);

-- A rate-limited queue's starts: `cur` in the period that began at window_start, `prev`
-- in the one before (a sliding window counter).
CREATE TABLE {ns}.rate_windows (
    queue        text PRIMARY KEY,
    window_start bigint NOT NULL,
    prev         integer NOT NULL,
    cur          integer NOT NULL
);

-- The same per job key, for a queue with key_rate_limit; a key's row goes when its
-- window is two periods old (the claim deletes them).
CREATE TABLE {ns}.key_rate_windows (
    queue        text NOT NULL,
    key          text NOT NULL,
    window_start bigint NOT NULL,
    prev         integer NOT NULL,
    cur          integer NOT NULL,
    PRIMARY KEY (queue, key)
);
CREATE INDEX key_rate_windows_age ON {ns}.key_rate_windows (queue, window_start);

-- The claim of a limited queue. Its claims take turns (a transaction-level advisory
-- lock per queue, held to the end of the caller's one-statement transaction), and each
-- statement below runs on a snapshot taken after the lock: the leases counted include
-- those of the claim before. Then as the claim: the first p_scan claimable jobs in
-- claim order (SKIP LOCKED), of them those whose key is under p_key_limit counting the
-- ones before them, at most p_n, what p_limit leaves and what the rate window leaves.
-- Runs with its owner's rights (rate_windows needs no grant). Each claimed key's rate
-- window is counted by the caller in the same transaction (count_key_starts), while
-- this lock is held.
CREATE FUNCTION {ns}.claim_limited(
    p_queue text, p_now bigint, p_lease_ms bigint, p_n integer, p_go integer,
    p_scan integer, p_limit integer, p_key_limit integer, p_rate integer, p_period bigint,
    p_key_rate integer
) RETURNS TABLE (
    id bigint, queue text, priority integer, claimed_for bigint, attempts integer,
    max_attempts integer, backoff text, lease_token bigint, lease_ms bigint,
    enqueued_at bigint, type text, key text, "position" bigint, headers text,
    payload text, progress text, started boolean
) LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := coalesce(p_now, (extract(epoch FROM statement_timestamp()) * 1000)::bigint);
    v_take integer := p_n;
    v_start bigint;
    v_used double precision := 0;
    v_got integer;
    w record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('alkstore.limits'), hashtext('{ns}.' || p_queue));
    IF EXISTS (SELECT 1 FROM {ns}.queues AS q WHERE q.name = p_queue AND q.paused) THEN
        RETURN;
    END IF;
    IF p_limit IS NOT NULL THEN
        v_take := least(v_take, p_limit - (
            SELECT count(*) FROM {ns}.jobs AS r
            WHERE r.lease_token IS NOT NULL AND r.visible_at > v_now AND r.queue = p_queue));
    END IF;
    IF p_rate IS NOT NULL THEN
        v_start := (v_now / p_period) * p_period;
        SELECT * INTO w FROM {ns}.rate_windows AS r WHERE r.queue = p_queue;
        IF FOUND AND w.window_start = v_start THEN
            v_used := w.prev * (p_period - (v_now - v_start))::float8 / p_period + w.cur;
        ELSIF FOUND AND w.window_start = v_start - p_period THEN
            v_used := w.cur * (p_period - (v_now - v_start))::float8 / p_period;
        END IF;
        v_take := least(v_take, floor(p_rate - v_used)::integer);
    END IF;
    IF v_take <= 0 THEN
        RETURN;
    END IF;
    v_start := (v_now / p_period) * p_period;
    IF p_key_limit IS NULL AND p_key_rate IS NULL THEN  -- the lean path: the first v_take claimable jobs
        RETURN QUERY
        WITH pick AS (
            SELECT j.id FROM {ns}.jobs AS j
            WHERE j.queue = p_queue AND j.visible_at <= v_now
              AND j.attempts < j.max_attempts
              AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > v_now)
              AND (j.lease_token IS NULL OR p_now IS NOT NULL
                   OR v_now - (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint
                      >= j.lease_ms)
            ORDER BY j.priority DESC, j.visible_at, j.id
            LIMIT v_take
            FOR UPDATE SKIP LOCKED
        ), done AS (
        UPDATE {ns}.jobs AS j SET
            attempts = j.attempts + p_go,
            started = p_go::boolean,
            claimed_for = j.visible_at,
            visible_at = v_now + p_lease_ms,
            lease_ms = p_lease_ms,
            lease_token = floor(random() * 9007199254740991)::bigint + 1,
            history = CASE WHEN j.lease_token IS NULL OR NOT j.started THEN j.history
                      ELSE j.history || jsonb_build_array(jsonb_build_object(
                          'attempt', j.attempts, 'error', 'lease expired', 'at', j.visible_at))
                      END
        WHERE j.id = ANY(ARRAY(SELECT id FROM pick))
        RETURNING j.id, j.queue, j.priority, j.claimed_for, j.attempts, j.max_attempts,
                  j.backoff::text, j.lease_token, j.lease_ms, j.enqueued_at, j.type, j.key,
                  j.position, j.headers::text, j.payload::text, j.progress::text, j.started
        )
        SELECT * FROM done;
        GET DIAGNOSTICS v_got = ROW_COUNT;
    ELSE
    RETURN QUERY
    WITH running AS MATERIALIZED (  -- once per claim, not once per candidate
        SELECT r.key, count(*) AS n FROM {ns}.jobs AS r
        WHERE r.lease_token IS NOT NULL AND r.visible_at > v_now AND r.queue = p_queue
        GROUP BY r.key
    ), key_rate AS (
        SELECT w.key, CASE
            WHEN w.window_start = v_start
            THEN w.prev * (p_period - (v_now - v_start))::float8 / p_period + w.cur
            WHEN w.window_start = v_start - p_period
            THEN w.cur * (p_period - (v_now - v_start))::float8 / p_period
            ELSE 0 END AS used
        FROM {ns}.key_rate_windows AS w WHERE w.queue = p_queue AND p_key_rate IS NOT NULL
    ), cand AS (
        SELECT c.id, c.key, c.priority, c.visible_at,
               row_number() OVER (PARTITION BY c.key
                                  ORDER BY c.priority DESC, c.visible_at, c.id) AS rk
        FROM (SELECT j.id, j.key, j.priority, j.visible_at FROM {ns}.jobs AS j
              WHERE j.queue = p_queue AND j.visible_at <= v_now
                AND j.attempts < j.max_attempts
                AND (j.expires_at IS NULL OR j.attempts > 0 OR j.expires_at > v_now)
                AND (j.lease_token IS NULL OR p_now IS NOT NULL
                     OR v_now - (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint
                        >= j.lease_ms)
              ORDER BY j.priority DESC, j.visible_at, j.id
              LIMIT p_scan
              FOR UPDATE SKIP LOCKED) AS c
    ), pick AS (
        SELECT c.id FROM cand AS c
        LEFT JOIN running AS r ON r.key = c.key
        LEFT JOIN key_rate AS k ON k.key = c.key
        WHERE c.key IS NULL
           OR ((p_key_limit IS NULL OR c.rk + coalesce(r.n, 0) <= p_key_limit)
               AND (p_key_rate IS NULL OR c.rk <= p_key_rate - coalesce(k.used, 0)))
        ORDER BY c.priority DESC, c.visible_at, c.id
        LIMIT v_take
    ), done AS (
    UPDATE {ns}.jobs AS j SET
        attempts = j.attempts + p_go,
        started = p_go::boolean,
        claimed_for = j.visible_at,
        visible_at = v_now + p_lease_ms,
        lease_ms = p_lease_ms,
        lease_token = floor(random() * 9007199254740991)::bigint + 1,
        history = CASE WHEN j.lease_token IS NULL OR NOT j.started THEN j.history
                  ELSE j.history || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'error', 'lease expired', 'at', j.visible_at))
                  END
    WHERE j.id = ANY(ARRAY(SELECT id FROM pick))
    RETURNING j.id, j.queue, j.priority, j.claimed_for, j.attempts, j.max_attempts,
              j.backoff::text, j.lease_token, j.lease_ms, j.enqueued_at, j.type, j.key,
              j.position, j.headers::text, j.payload::text, j.progress::text, j.started
    )
    SELECT * FROM done;
    GET DIAGNOSTICS v_got = ROW_COUNT;
    END IF;
    IF p_rate IS NOT NULL AND v_got > 0 THEN
        INSERT INTO {ns}.rate_windows AS r (queue, window_start, prev, cur)
        VALUES (p_queue, v_start, 0, v_got)
        ON CONFLICT (queue) DO UPDATE SET
            prev = CASE WHEN r.window_start = v_start THEN r.prev
                        WHEN r.window_start = v_start - p_period THEN r.cur
                        ELSE 0 END,
            cur = CASE WHEN r.window_start = v_start THEN r.cur + v_got ELSE v_got END,
            window_start = v_start;
    END IF;
END $$;
