-- A key at its limit no longer hides the other keys' jobs (docs/adr/0021, addendum of
-- 2026-12-01). The claim of a queue with a key limit or a key rate looks at the first
-- p_scan claimable jobs in claim order; a hot key with more waiting jobs than that filled
-- the scan, and the claim found nothing although other keys had jobs ready
-- (tests/contract/test_key_limits.py). Now the jobs of keys already at their limit are
-- not candidates (`at_limit`). Otherwise the function is migration 0008's.
CREATE OR REPLACE FUNCTION {ns}.claim_limited(
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
    ), at_limit AS MATERIALIZED (  -- keys at their limit: their jobs are not candidates
        SELECT r.key FROM running AS r WHERE r.key IS NOT NULL AND r.n >= p_key_limit
        UNION
        SELECT k.key FROM key_rate AS k WHERE k.used > p_key_rate - 1
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
                AND (j.key IS NULL OR NOT EXISTS (SELECT 1 FROM at_limit AS f WHERE f.key = j.key))
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
