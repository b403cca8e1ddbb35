-- Durable named queues (docs/adr/0006-queue-semantics.md).
-- Times are unix epoch milliseconds from the store's clock, as on SQLite.
CREATE TABLE {ns}.queues (
    name              text PRIMARY KEY,
    max_attempts      integer NOT NULL CHECK (max_attempts >= 1),
    backoff           jsonb NOT NULL,
    visibility_ms     bigint NOT NULL CHECK (visibility_ms > 0),
    dead_retention_ms bigint CHECK (dead_retention_ms > 0)
);

-- Live jobs. A job is claimable when visible_at <= now; a claim pushes
-- visible_at to the lease's end and stamps lease_token.
CREATE TABLE {ns}.jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text NOT NULL,
    priority      integer NOT NULL DEFAULT 0,
    visible_at    bigint NOT NULL,
    enqueued_at   bigint NOT NULL,
    expires_at    bigint,
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL,
    backoff       jsonb,
    lease_token   bigint,
    lease_ms      bigint,
    claimed_for   bigint,  -- visible_at when last claimed: the run time it was due
    dedupe_key    text,
    type          text,
    key           text,
    position      bigint,
    headers       jsonb,
    payload       jsonb NOT NULL,
    progress      jsonb,
    history       jsonb NOT NULL DEFAULT '[]'
);
CREATE INDEX jobs_claim ON {ns}.jobs (queue, priority DESC, visible_at, id);
CREATE UNIQUE INDEX jobs_dedupe ON {ns}.jobs (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX jobs_unclaimed_expiry ON {ns}.jobs (expires_at) WHERE expires_at IS NOT NULL AND attempts = 0;
CREATE INDEX jobs_leases ON {ns}.jobs (visible_at) WHERE lease_token IS NOT NULL;

CREATE TABLE {ns}.dead_letters (
    id            bigint PRIMARY KEY,
    queue         text NOT NULL,
    priority      integer NOT NULL,
    enqueued_at   bigint NOT NULL,
    attempts      integer NOT NULL,
    max_attempts  integer NOT NULL,
    backoff       jsonb,
    dedupe_key    text,
    type          text,
    key           text,
    position      bigint,
    headers       jsonb,
    payload       jsonb NOT NULL,
    history       jsonb NOT NULL,
    reason        text NOT NULL,
    died_at       bigint NOT NULL
);
CREATE INDEX dead_letters_queue ON {ns}.dead_letters (queue, id);
CREATE INDEX dead_letters_died ON {ns}.dead_letters (queue, died_at);

-- Named leases with fencing tokens (relay leadership; the PostgreSQL sweep
-- uses an advisory lock instead).
CREATE TABLE {ns}.locks (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    token      bigint NOT NULL,
    expires_at bigint NOT NULL
);
