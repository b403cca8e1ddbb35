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
    IF NOT EXISTS (SELECT 1 FROM {ns}.jobs WHERE queue = OLD.queue AND grp = OLD.grp) THEN
        DELETE FROM {ns}.job_groups WHERE queue = OLD.queue AND grp = OLD.grp;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_hold BEFORE INSERT ON {ns}.jobs
FOR EACH ROW WHEN (NEW.grp IS NOT NULL) EXECUTE FUNCTION {ns}.jobs_hold();
CREATE TRIGGER jobs_promote AFTER DELETE ON {ns}.jobs
FOR EACH ROW WHEN (OLD.grp IS NOT NULL AND OLD.held_due IS NULL)
EXECUTE FUNCTION {ns}.jobs_promote();
