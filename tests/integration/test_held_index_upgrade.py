"""Migration 0015 on a database with live ordered keys (docs/adr/0021, addendum
2026-12-01c): the keys' rows learn that their heads are in (`active`), the held jobs
keep their places, and the order goes on across the upgrade: a new job of a live key
waits behind it, a new key's first job is its head. PostgreSQL (SQLite's 0015 changes
nothing)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import alkstore
from alkstore import _sql
from tests.conftest import Backend


def test_an_upgrade_keeps_every_keys_order(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = _sql.migrations

    def up_to_14(package: str, ns: str) -> list[tuple[int, str, Any]]:
        return [m for m in every(package, ns) if m[0] <= 14]

    ns = f"{pg_backend.namespace}_up"
    store = alkstore.connect(pg_backend.url, namespace=ns)
    try:
        monkeypatch.setattr(_sql, "migrations", up_to_14)
        assert store.migrate() == list(range(1, 15))
        q = store.queue("ordered")
        q.configure(ordered=True)
        q.enqueue_many(["a1", "a2", "a3"], group="a")
        q.enqueue_many(["b1"], group="b")
        [first, *_] = q.claim_many(1)  # a1 is running across the upgrade
        assert first.raw_payload == "a1"

        monkeypatch.setattr(_sql, "migrations", every)
        assert store.migrate() == [15]
        with psycopg.connect(pg_backend.url) as conn:
            rows = conn.execute(f"SELECT grp, active FROM {ns}.job_groups ORDER BY grp").fetchall()
        assert rows == [("a", True), ("b", True)]

        q.enqueue("a4", group="a")
        q.enqueue("b2", group="b")
        q.enqueue("c1", group="c")
        assert [(i.key, i.state) for i in q.jobs()] == [
            ("a", "running"),
            ("a", "held"),
            ("a", "held"),
            ("b", "ready"),
            ("a", "held"),
            ("b", "held"),
            ("c", "ready"),
        ]
        first.ack()
        seen: list[str] = []
        while jobs := q.claim_many(10):
            seen += sorted(str(job.raw_payload) for job in jobs)
            assert q.ack_many(jobs) == []
        assert seen == ["a2", "b1", "c1", "a3", "b2", "a4"]
        with psycopg.connect(pg_backend.url) as conn:
            left = conn.execute(f"SELECT count(*) FROM {ns}.job_groups").fetchone()
        assert left == (0,)
    finally:
        store.close()
        with psycopg.connect(pg_backend.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {ns} CASCADE")
