-- Attempts count when a handler starts, not when a job is claimed (ADR 0012): a
-- prefetched job is leased with started = 0 and its attempt is counted when the
-- worker starts it. Jobs leased before this migration count as started.
ALTER TABLE {ns}__jobs ADD COLUMN started INTEGER NOT NULL DEFAULT 0;
UPDATE {ns}__jobs SET started = 1 WHERE lease_token IS NOT NULL;
-- Exhausted live jobs (leased or not) for the sweep to bury.
CREATE INDEX {ns}__jobs_exhausted ON {ns}__jobs (queue, id) WHERE attempts >= max_attempts;
