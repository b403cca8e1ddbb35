-- Per-key ordered delivery (docs/adr/0021, addendum 2026-12-01): a statement that deletes
-- the heads of several keys (ack_many, a sweep, purge) promotes their next jobs once, in
-- set-based statements, and takes the keys' rows in sorted (queue, key) order, the order
-- the relay's fan-out takes them in too (relay_lock_keys): two such writers wait for each
-- other but never deadlock. It was a row trigger: a call and two or three statements per
-- deleted head, the keys locked in the delete's order.
DROP TRIGGER jobs_promote ON {ns}.jobs;
DROP FUNCTION {ns}.jobs_promote();

-- The keys (sorted, distinct) whose heads a statement deleted. Runs with its owner's
-- rights (a worker needs no privilege on job_groups), as the row trigger did. Each
-- statement takes a fresh snapshot after the locks (READ COMMITTED): a job inserted
-- meanwhile by a writer of the key that held its row is seen.
CREATE FUNCTION {ns}.jobs_promote_keys(p_queues text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {ns}.job_groups AS g
    WHERE (g.queue, g.grp) IN (SELECT * FROM unnest(p_queues, p_keys))
    ORDER BY g.queue, g.grp
    FOR UPDATE;
    UPDATE {ns}.jobs AS j SET visible_at = j.held_due, held_due = NULL
    WHERE j.id = ANY(ARRAY(
        SELECT (SELECT n.id FROM {ns}.jobs AS n WHERE n.queue = k.queue AND n.grp = k.grp
                ORDER BY n.id LIMIT 1)
        FROM unnest(p_queues, p_keys) AS k (queue, grp)))
      AND j.held_due IS NOT NULL;
    DELETE FROM {ns}.job_groups AS g  -- the keys whose last job went
    USING unnest(p_queues, p_keys) AS k (queue, grp)
    WHERE g.queue = k.queue AND g.grp = k.grp
      AND NOT EXISTS (SELECT 1 FROM {ns}.jobs AS j WHERE j.queue = k.queue AND j.grp = k.grp);
END $$;

-- The relay's side (relay_lock_keys, before relay_insert in the batch's transaction): the
-- rows of the keys a batch writes, sorted, created or locked in that order. DO UPDATE ...
-- WHERE false updates nothing but locks an existing row; a row deleted meanwhile (its
-- key's last job went) is inserted again. The insert trigger (jobs_hold) then finds each
-- key's row already held. Owner's rights: the relay needs no privilege on job_groups.
CREATE FUNCTION {ns}.jobs_lock_keys(p_queues text[], p_keys text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {ns}.job_groups AS g (queue, grp)
    SELECT k.queue, k.grp FROM unnest(p_queues, p_keys) AS k (queue, grp)
    ORDER BY k.queue, k.grp
    ON CONFLICT (queue, grp) DO UPDATE SET grp = excluded.grp WHERE false
$$;

-- `gone`: the rows the statement deleted. A statement that deleted no head of an ordered
-- key (every unordered ack) ends at the first test. Not SECURITY DEFINER, no SET: a
-- function with either saves and restores the caller's settings on every call, which
-- cost an unordered ack_many more than the test (bench/promote_cost.py). It reads only
-- `gone` and names everything else with its schema.
CREATE FUNCTION {ns}.jobs_promote() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone WHERE grp IS NOT NULL AND held_due IS NULL) THEN
        PERFORM {ns}.jobs_promote_keys(
            array_agg(k.queue ORDER BY k.queue, k.grp), array_agg(k.grp ORDER BY k.queue, k.grp))
        FROM (SELECT DISTINCT o.queue, o.grp FROM gone AS o
              WHERE o.grp IS NOT NULL AND o.held_due IS NULL) AS k;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_promote AFTER DELETE ON {ns}.jobs
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION {ns}.jobs_promote();
