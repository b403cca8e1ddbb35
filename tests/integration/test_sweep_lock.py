"""PostgreSQL's sweep lock is a transaction-level advisory lock (ADR 0006 addendum
2026-12-01): the end of its transaction releases it, never a statement that has to run.

A session lock on a pooled connection stays held when its unlock does not run (the
connection breaks, a pooler swaps the server connection) and then no process sweeps
until that connection closes. Here the sweep is stopped inside its first batch: the
lock's holder is a backend idle in a transaction, and a holder terminated meanwhile
costs nothing: the sweep finishes, and the next one runs."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.contract.test_sweep_lock import sweep_held_open

HOLDER = """
SELECT l.pid, a.state FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = hashtext('alkstore')::oid AND l.objid = hashtext(%s)::oid
  AND l.objsubid = 2
"""


def holders(backend: Backend) -> list[tuple[Any, ...]]:
    with psycopg.connect(backend.url, autocommit=True) as conn:
        return conn.execute(HOLDER, (f"{backend.namespace}.sweep",)).fetchall()


def test_the_sweep_lock_is_held_by_a_transaction(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg_backend.migrated() as store:
        with sweep_held_open(store, monkeypatch):
            ((_, state),) = holders(pg_backend)
            assert state == "idle in transaction", f"the lock's holder is {state!r}"
        assert holders(pg_backend) == []


def test_a_sweep_whose_lock_holder_is_terminated_finishes(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="alkstore.postgres")
    with pg_backend.migrated() as store, pg_backend.migrated() as other:
        with sweep_held_open(store, monkeypatch) as result:
            ((pid, _),) = holders(pg_backend)
            with psycopg.connect(pg_backend.url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert holders(pg_backend) == []
            assert other.sweep().ran, "the terminated holder still held the lock"
        assert result == [alkstore.SweepResult(True, 0, 0, 0)], "the sweep did not finish"
        assert "sweep lock" in caplog.text and "terminating connection" in caplog.text
        assert store.sweep() == alkstore.SweepResult(True, 0, 0, 0)
