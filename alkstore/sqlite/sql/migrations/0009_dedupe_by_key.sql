-- Dedupe on the relay's fan-out (docs/adr/0022): a subscription whose jobs take their
-- event's key as their dedupe key (subscribe(..., dedupe_by_key=True)).
ALTER TABLE {ns}__subscriptions ADD COLUMN dedupe INTEGER NOT NULL DEFAULT 0;
