-- The operator's cockpit (issue 15). A paused queue keeps its jobs and hands none
-- out (claims skip it, cluster-wide); a queue that jobs reach without a declared
-- row gets one when an operator pauses it. Workers announce themselves in
-- workers and refresh last_seen while they run; rows not seen for a while are
-- dead workers and age out. Times: epoch ms.
ALTER TABLE {ns}.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;

CREATE TABLE {ns}.workers (
    id          text PRIMARY KEY,   -- random per worker run
    host        text NOT NULL,
    pid         integer NOT NULL,
    queues      jsonb NOT NULL,     -- list of queue names
    concurrency integer NOT NULL,
    started_at  bigint NOT NULL,
    last_seen   bigint NOT NULL
);
CREATE INDEX workers_seen ON {ns}.workers (last_seen);
