-- Least privilege (docs/adr/0020). Reading the log numbers the events committed since
-- (ADR 0004), which updates the events and the head: the sequencer runs with its
-- owner's rights, so a role that only reads (status, events tail) needs EXECUTE on it,
-- not UPDATE on the log. Its search_path is pinned: a function running with its owner's
-- rights resolves nothing through the caller's.
ALTER FUNCTION {ns}.sequence_events(integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Retention gaps (docs/adr/0020): the first and last of the positions a subscription
-- asked for (subscribe from a position, replay) that retention had already pruned, as
-- recorded by the last of them; NULL: none were missing.
ALTER TABLE {ns}.subscriptions ADD COLUMN gap_first bigint, ADD COLUMN gap_last bigint;
