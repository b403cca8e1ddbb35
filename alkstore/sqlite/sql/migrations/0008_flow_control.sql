-- Flow control (docs/adr/0021): per-key ordered delivery.
-- A queue declared `ordered` gives each job with a key (the event key of a relayed job,
-- the `group=` of a direct enqueue) that key in `grp`. Of a key's live jobs only the
-- head (the oldest) is claimable; the others are held: visible_at is the HELD sentinel
-- (9e15 ms, past any real time, so the unchanged claim never reads them) and held_due
-- keeps the run time they take when they become the head. A head that failed for good
-- under the `park` policy waits at the PARKED sentinel (8e15) until an operator releases
-- its key. Triggers keep this true on every path that adds or removes a job (enqueue,
-- relay fan-out, requeue; ack, bury, sweeps, cancel, purge).
ALTER TABLE {ns}__jobs ADD COLUMN grp TEXT;
ALTER TABLE {ns}__jobs ADD COLUMN held_due INTEGER;
ALTER TABLE {ns}__dead_letters ADD COLUMN grp TEXT;
ALTER TABLE {ns}__queues ADD COLUMN ordered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {ns}__queues ADD COLUMN head_policy TEXT NOT NULL DEFAULT 'block'
    CHECK (head_policy IN ('block', 'dead_letter', 'park'));
CREATE INDEX {ns}__jobs_group ON {ns}__jobs (queue, grp, id) WHERE grp IS NOT NULL;

-- A new job of a key that has live jobs is held behind them (one writer at a time:
-- nothing can slip in between the look and the write).
CREATE TRIGGER {ns}__jobs_hold AFTER INSERT ON {ns}__jobs
WHEN new.grp IS NOT NULL AND EXISTS (
    SELECT 1 FROM {ns}__jobs AS o
    WHERE o.queue = new.queue AND o.grp = new.grp AND o.id <> new.id)
BEGIN
    UPDATE {ns}__jobs SET held_due = visible_at, visible_at = 9000000000000000
    WHERE id = new.id;
END;

-- The head left (acked, dead-lettered, cancelled): the key's next job becomes the head,
-- due at its own run time.
CREATE TRIGGER {ns}__jobs_promote AFTER DELETE ON {ns}__jobs
WHEN old.grp IS NOT NULL AND old.held_due IS NULL
BEGIN
    UPDATE {ns}__jobs SET visible_at = held_due, held_due = NULL
    WHERE id = (SELECT o.id FROM {ns}__jobs AS o
                WHERE o.queue = old.queue AND o.grp = old.grp
                ORDER BY o.id LIMIT 1)
      AND held_due IS NOT NULL;
END;

-- Cluster-wide limits (docs/adr/0021), read by the claim of a limited queue only
-- (claim_limited): at most `concurrency` leases of the queue at once, at most
-- `key_concurrency` per job key, at most `rate_limit` starts per `rate_period_ms`.
-- NULL: no such limit. Leases are the slots: a crashed holder's come back when its
-- lease runs out, with nothing to clean up.
ALTER TABLE {ns}__queues ADD COLUMN concurrency INTEGER CHECK (concurrency >= 1);
ALTER TABLE {ns}__queues ADD COLUMN key_concurrency INTEGER CHECK (key_concurrency >= 1);
ALTER TABLE {ns}__queues ADD COLUMN rate_limit INTEGER CHECK (rate_limit >= 1);
ALTER TABLE {ns}__queues ADD COLUMN rate_period_ms INTEGER CHECK (rate_period_ms >= 1);
ALTER TABLE {ns}__queues ADD COLUMN key_rate_limit INTEGER CHECK (key_rate_limit >= 1);

-- A rate-limited queue's starts: `cur` in the period that began at window_start, `prev`
-- in the one before (a sliding window counter).
CREATE TABLE {ns}__rate_windows (
    queue        TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    prev         INTEGER NOT NULL,
    cur          INTEGER NOT NULL
);

-- The same per job key, for a queue with key_rate_limit; a key's row goes when its
-- window is two periods old (the claim deletes them).
CREATE TABLE {ns}__key_rate_windows (
    queue        TEXT NOT NULL,
    key          TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    prev         INTEGER NOT NULL,
    cur          INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE INDEX {ns}__key_rate_windows_age ON {ns}__key_rate_windows (queue, window_start);
