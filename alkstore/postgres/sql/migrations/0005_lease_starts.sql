-- Attempts count when a handler starts, not when a job is claimed (ADR 0012): a
-- prefetched job is leased with started = false and its attempt is counted when
-- the worker starts it. Jobs leased before this migration count as started.
ALTER TABLE {ns}.jobs ADD COLUMN started boolean NOT NULL DEFAULT false;
UPDATE {ns}.jobs SET started = true WHERE lease_token IS NOT NULL;
-- Exhausted live jobs (leased or not) for the sweep to bury.
CREATE INDEX jobs_exhausted ON {ns}.jobs (queue, id) WHERE attempts >= max_attempts;
