-- The operator's cockpit (issue 15). A paused queue keeps its jobs and hands none
-- out (claims skip it, cluster-wide); a queue that jobs reach without a declared
-- row gets one when an operator pauses it. Workers announce themselves in
-- workers and refresh last_seen while they run; rows not seen for a while are
-- dead workers and age out. Times: epoch ms.
ALTER TABLE {ns}__queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;

CREATE TABLE {ns}__workers (
    id          TEXT PRIMARY KEY,   -- random per worker run
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    queues      TEXT NOT NULL,      -- JSON list of queue names
    concurrency INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL
);
CREATE INDEX {ns}__workers_seen ON {ns}__workers (last_seen);
