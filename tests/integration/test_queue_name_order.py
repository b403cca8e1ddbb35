"""PostgreSQL: queue names list in byte order whatever the database's collation, as on
SQLite (ADR 0006, addendum 2026-12-01: names may mix case and punctuation)."""

from __future__ import annotations

from tests.conftest import Backend

NAMES = ["b.x", "B-y", "a", "a:b", "a/b", "A", "billing-v2", "billing.v1"]


def test_subscriptions_and_status_list_queues_in_byte_order(pg_backend: Backend) -> None:
    with pg_backend.migrated() as store:
        with store.transaction() as tx:  # as if the database's default collation were ICU's
            tx.connection.execute(
                f"ALTER TABLE {store.namespace}.subscriptions "
                'ALTER COLUMN queue TYPE text COLLATE "und-x-icu"'
            )
        for name in NAMES:
            store.subscribe(name, ["*"])
        assert [s.queue for s in store.subscriptions()] == sorted(NAMES)
        assert [lag.queue for lag in store.status().subscriptions] == sorted(NAMES)
