-- Per-key ordered delivery without an index entry per claim (docs/adr/0021, addendum
-- 2026-12-01c). The index jobs_group (queue, grp, id) held every job of an ordered key,
-- so each claim and each promotion (updates that move a job in the claim index, never
-- HOT) added an entry to it as well: a third of what an ordered job cost over an
-- unordered one. Only the held jobs are looked up by key (the promotion takes the oldest;
-- an operator's release finds a parked head), so the index holds only those now.
--
-- The insert trigger asked the index whether its key had a job at all, the head
-- included; it now asks the key's row. `active`: a head of the key was inserted and the
-- key has not emptied since (set by jobs_headed after the insert, so an insert that ON
-- CONFLICT skipped or turned into an update never sets it); the promotion deletes the
-- row when it finds no held job left, the key's last job gone. `head`: the id of the last
-- job the insert trigger made a head, which a later row of the same statement (before
-- jobs_headed ran) finds by id; a head that was never inserted is not found, and the
-- next job of its key becomes the head instead.
ALTER TABLE {ns}.job_groups ADD COLUMN active boolean NOT NULL DEFAULT false,
    ADD COLUMN head bigint;
UPDATE {ns}.job_groups AS g SET active = true
WHERE EXISTS (SELECT 1 FROM {ns}.jobs AS j WHERE j.queue = g.queue AND j.grp = g.grp);
CREATE INDEX jobs_held ON {ns}.jobs (queue, grp, id)
WHERE held_due IS NOT NULL OR visible_at = 8000000000000000;  -- held, or a parked head
DROP INDEX {ns}.jobs_group;

CREATE OR REPLACE FUNCTION {ns}.jobs_hold() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    g record;
BEGIN
    LOOP
        INSERT INTO {ns}.job_groups AS k (queue, grp, head) VALUES (NEW.queue, NEW.grp, NEW.id)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN NEW;  -- a new key: this job is its head
        END IF;
        SELECT k.active, k.head INTO g FROM {ns}.job_groups AS k
        WHERE k.queue = NEW.queue AND k.grp = NEW.grp FOR UPDATE;
        EXIT WHEN FOUND;  -- else the head's removal took the row away meanwhile
    END LOOP;
    IF g.active OR EXISTS (SELECT 1 FROM {ns}.jobs WHERE id = g.head) THEN
        NEW.held_due := NEW.visible_at;
        NEW.visible_at := 9000000000000000;
    ELSE
        UPDATE {ns}.job_groups AS k SET head = NEW.id
        WHERE k.queue = NEW.queue AND k.grp = NEW.grp;
    END IF;
    RETURN NEW;
END $$;

-- After each inserted head (the statement's rows are in): its key is active.
CREATE FUNCTION {ns}.jobs_headed() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {ns}.job_groups AS k SET active = true
    WHERE k.queue = NEW.queue AND k.grp = NEW.grp AND NOT k.active;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_headed AFTER INSERT ON {ns}.jobs
FOR EACH ROW WHEN (NEW.grp IS NOT NULL AND NEW.held_due IS NULL)
EXECUTE FUNCTION {ns}.jobs_headed();

-- The promotion (migration 0012's, sorted row locks unchanged): each key's oldest held
-- job, found through jobs_held and updated by its row's address; the keys with none left
-- lose their row. A held job that a writer without the key's lock (cancel, an operator's
-- retry) deleted or changed after this statement's snapshot is skipped by the update:
-- its key is tried again with a fresh snapshot, which finds the job's new version or
-- the next job (before, such a key waited for good).
CREATE OR REPLACE FUNCTION {ns}.jobs_promote_keys(p_queues text[], p_keys text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_queues text[] := p_queues;
    v_keys text[] := p_keys;
BEGIN
    PERFORM 1 FROM {ns}.job_groups AS g
    WHERE (g.queue, g.grp) IN (SELECT * FROM unnest(p_queues, p_keys))
    ORDER BY g.queue, g.grp
    FOR UPDATE;
    LOOP
        WITH promoted AS (
            UPDATE {ns}.jobs AS j SET visible_at = j.held_due, held_due = NULL
            WHERE j.ctid = ANY(ARRAY(
                SELECT (SELECT n.ctid FROM {ns}.jobs AS n
                        WHERE n.queue = k.queue AND n.grp = k.grp AND n.held_due IS NOT NULL
                        ORDER BY n.id LIMIT 1)
                FROM unnest(v_queues, v_keys) AS k (queue, grp)))
              AND j.held_due IS NOT NULL
            RETURNING j.queue, j.grp
        ), rest AS (
            SELECT k.queue, k.grp FROM unnest(v_queues, v_keys) AS k (queue, grp)
            WHERE NOT EXISTS (SELECT 1 FROM promoted AS p WHERE p.queue = k.queue AND p.grp = k.grp)
        ), waiting AS (  -- not promoted, yet a held job is there: try again
            SELECT k.queue, k.grp FROM rest AS k
            WHERE EXISTS (SELECT 1 FROM {ns}.jobs AS n
                          WHERE n.queue = k.queue AND n.grp = k.grp AND n.held_due IS NOT NULL)
        ), emptied AS (
            DELETE FROM {ns}.job_groups AS g USING rest AS k
            WHERE g.queue = k.queue AND g.grp = k.grp
              AND NOT EXISTS (SELECT 1 FROM waiting AS w WHERE w.queue = k.queue AND w.grp = k.grp)
        )
        SELECT array_agg(w.queue), array_agg(w.grp) INTO v_queues, v_keys FROM waiting AS w;
        EXIT WHEN v_queues IS NULL;
    END LOOP;
END $$;
