-- Replace and debounce on the relay's fan-out (docs/adr/0022, addendum 2026-12-01): a
-- subscription whose jobs take their event's key as dedupe key and are *replaced* by a
-- newer event's while they wait (subscribe(..., replace_by_key=True)), due replace_ms
-- after the newest one's relay (debounce_by_key=seconds; 0: replace). NULL: neither.
-- (0011 and 0012 are other changes of the same wave: the numbers only, not the content.)
ALTER TABLE {ns}.subscriptions ADD COLUMN replace_ms bigint CHECK (replace_ms >= 0);
