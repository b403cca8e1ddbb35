"""PostgreSQL's sequencing backlog as status reports it (ADR 0004), and reads that
number the backlog a bounded batch per statement."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import alkstore
from alkstore.postgres import _engine as pg_engine
from tests.conftest import Backend
from tests.events import Written


def test_status_reports_unsequenced_events_and_the_oldest_appender(pg_backend: Backend) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, psycopg.connect(pg_backend.url) as app:
        with psycopg.connect(pg_backend.url) as committed:
            alkstore.append(committed, Written(writer=1, seq=0), namespace=ns)
            alkstore.append(committed, Written(writer=1, seq=1), namespace=ns)
            committed.commit()
        app.execute("SELECT 1")  # an open transaction that has not appended: not holding
        quiet = store.status()
        assert (quiet.unsequenced, quiet.oldest_appender) == (2, None)
        assert quiet.head == 2, "status numbers the backlog after counting it"

        alkstore.append(app, Written(writer=2, seq=0), namespace=ns)
        holding = store.status()
        assert holding.unsequenced == 0, "uncommitted events are not counted"
        assert holding.oldest_appender is not None
        assert holding.oldest_appender.pid == app.info.backend_pid
        assert holding.oldest_appender.state == "idle in transaction"
        assert holding.head == 2
        app.commit()
        after = store.status()
        assert (after.unsequenced, after.oldest_appender, after.head) == (1, None, 3)


def test_a_large_read_numbers_the_backlog_a_batch_per_statement(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_engine, "SEQUENCE_BATCH", 10)
    with pg_backend.migrated() as store:
        with store.transaction() as tx:
            tx.append_many([Written(writer=1, seq=n) for n in range(45)])
        engine: Any = store.engine
        batches: list[int] = []
        sequence = engine._sequence

        def spy(conn: Any, batch: int = pg_engine.SEQUENCE_BATCH) -> int:
            batches.append(batch)
            numbered: int = sequence(conn, batch)
            return numbered

        monkeypatch.setattr(engine, "_sequence", spy)
        entries = store.log.read(0, 1_000_000)
        assert [e.payload.seq for e in entries] == list(range(45))  # type: ignore[attr-defined]
        assert batches == [10] * 5, "the read numbered its backlog in one statement"
