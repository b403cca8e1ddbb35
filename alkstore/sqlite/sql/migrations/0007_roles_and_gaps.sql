-- Retention gaps (docs/adr/0020): the first and last of the positions a subscription
-- asked for (subscribe from a position, replay) that retention had already pruned, as
-- recorded by the last of them; NULL: none were missing. (The roles half of this
-- migration is PostgreSQL's: SQLite has no roles.)
ALTER TABLE {ns}__subscriptions ADD COLUMN gap_first INTEGER;
ALTER TABLE {ns}__subscriptions ADD COLUMN gap_last INTEGER;
