-- Broker sinks (docs/adr/0026): a subscription may feed a message broker instead of a
-- queue. sink: the broker's URL (NULL: a queue subscription, named by `queue`);
-- sink_options: the sink's settings (destination template, ...); parked: why the relay
-- stopped feeding it (a message the broker rejects for good; NULL: running) and
-- parked_at when (epoch ms). A parked subscription keeps its checkpoint: nothing is
-- skipped, `store.resume_sink` (or `alkstore subscriptions resume`) starts it again.
ALTER TABLE {ns}.subscriptions
    ADD COLUMN sink text, ADD COLUMN sink_options jsonb,
    ADD COLUMN parked text, ADD COLUMN parked_at bigint;
