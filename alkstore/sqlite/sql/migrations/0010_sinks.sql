-- Broker sinks (docs/adr/0026): a subscription may feed a message broker instead of a
-- queue. sink: the broker's URL (NULL: a queue subscription, named by `queue`);
-- sink_options: JSON, the sink's settings (destination template, ...); parked: why the
-- relay stopped feeding it (a message the broker rejects for good; NULL: running) and
-- parked_at when (epoch ms). A parked subscription keeps its checkpoint: nothing is
-- skipped, `store.resume_sink` (or `alkstore subscriptions resume`) starts it again.
ALTER TABLE {ns}__subscriptions ADD COLUMN sink TEXT;
ALTER TABLE {ns}__subscriptions ADD COLUMN sink_options TEXT;
ALTER TABLE {ns}__subscriptions ADD COLUMN parked TEXT;
ALTER TABLE {ns}__subscriptions ADD COLUMN parked_at INTEGER;
