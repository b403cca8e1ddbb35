-- Durable named queues (docs/adr/0006-queue-semantics.md). Times: epoch ms.
CREATE TABLE {ns}__queues (
    name              TEXT PRIMARY KEY,
    max_attempts      INTEGER NOT NULL CHECK (max_attempts >= 1),
    backoff           TEXT NOT NULL,
    visibility_ms     INTEGER NOT NULL CHECK (visibility_ms > 0),
    dead_retention_ms INTEGER CHECK (dead_retention_ms > 0)
);

-- Live jobs. A job is claimable when visible_at <= now; a claim pushes
-- visible_at to the lease's end and stamps lease_token. AUTOINCREMENT: ids
-- are never reused, so a requeued dead letter keeps its id safely.
CREATE TABLE {ns}__jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT NOT NULL,
    priority      INTEGER NOT NULL DEFAULT 0,
    visible_at    INTEGER NOT NULL,
    enqueued_at   INTEGER NOT NULL,
    expires_at    INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL,
    backoff       TEXT,
    lease_token   INTEGER,
    lease_ms      INTEGER,
    claimed_for   INTEGER,  -- visible_at when last claimed: the run time it was due
    dedupe_key    TEXT,
    type          TEXT,
    key           TEXT,
    position      INTEGER,
    headers       TEXT,
    payload       TEXT NOT NULL,
    progress      TEXT,
    history       TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX {ns}__jobs_claim ON {ns}__jobs (queue, priority DESC, visible_at, id);
CREATE UNIQUE INDEX {ns}__jobs_dedupe ON {ns}__jobs (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX {ns}__jobs_unclaimed_expiry ON {ns}__jobs (expires_at) WHERE expires_at IS NOT NULL AND attempts = 0;
CREATE INDEX {ns}__jobs_leases ON {ns}__jobs (visible_at) WHERE lease_token IS NOT NULL;

CREATE TABLE {ns}__dead_letters (
    id            INTEGER PRIMARY KEY,
    queue         TEXT NOT NULL,
    priority      INTEGER NOT NULL,
    enqueued_at   INTEGER NOT NULL,
    attempts      INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    backoff       TEXT,
    dedupe_key    TEXT,
    type          TEXT,
    key           TEXT,
    position      INTEGER,
    headers       TEXT,
    payload       TEXT NOT NULL,
    history       TEXT NOT NULL,
    reason        TEXT NOT NULL,
    died_at       INTEGER NOT NULL
);
CREATE INDEX {ns}__dead_letters_queue ON {ns}__dead_letters (queue, id);
CREATE INDEX {ns}__dead_letters_died ON {ns}__dead_letters (queue, died_at);

-- Named leases with fencing tokens (the sweep now; relay leadership next).
CREATE TABLE {ns}__locks (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
