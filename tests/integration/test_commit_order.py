"""Commit order on PostgreSQL: positions follow commits, not inserts.

Identity values (`events.id`) are handed out at insert time, so an early appender
that commits late has a lower id than events already read. A reader that
checkpointed on ids would skip it; alkstore's positions are assigned after commit,
so a reader with a position checkpoint reads it next.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import Written


class Boom(Exception):
    pass


@contextmanager
def caller_connection(backend: Backend) -> Iterator[psycopg.Connection[Any]]:
    """A connection the application owns (not autocommit); rolled back and closed at exit."""
    conn: psycopg.Connection[Any] = psycopg.connect(backend.url)
    try:
        yield conn
    finally:
        conn.close()  # rolls back anything still open


def ids(entries: list[alkstore.LogEntry]) -> list[tuple[int, int]]:
    out = []
    for entry in entries:
        event = entry.payload
        assert isinstance(event, Written)
        out.append((event.writer, event.seq))
    return out


def rows_by_id(backend: Backend) -> list[tuple[int, int | None, int, int]]:
    """(id, position, writer, seq) of every stored event, by id."""
    with psycopg.connect(backend.url, autocommit=True) as conn:
        cursor = conn.execute(
            f"SELECT id, position, (payload->>'writer')::int, (payload->>'seq')::int "
            f"FROM {backend.namespace}.events ORDER BY id"
        )
        return [(r[0], r[1], r[2], r[3]) for r in cursor]


def test_first_appender_committing_last_is_read_after_the_checkpoint(
    pg_backend: Backend,
) -> None:
    ns = pg_backend.namespace
    event_a, event_b = Written(writer=1, seq=0), Written(writer=2, seq=0)
    with pg_backend.migrated() as store, caller_connection(pg_backend) as conn_a:
        alkstore.append(conn_a, event_a, namespace=ns)  # A: first insert, left open
        with caller_connection(pg_backend) as conn_b, conn_b.transaction():
            alkstore.append(conn_b, event_b, namespace=ns)  # B: second insert, commits

        first = store.log.read(after=0)
        assert ids(first) == [(2, 0)], "only B has committed"
        checkpoint = first[-1].position

        conn_a.commit()
        second = store.log.read(after=checkpoint)
        assert ids(second) == [(1, 0)], "A committed after the checkpoint: it is read next"
        assert second[0].position > checkpoint
        assert store.log.read(after=second[-1].position) == []

        # Why an id checkpoint would not do: A's row has the lower id but the later
        # position, so `id > id_of_B` would have skipped it for good.
        (id_a, pos_a, *_), (id_b, pos_b, *_) = rows_by_id(pg_backend)
        assert id_a < id_b
        assert pos_b == checkpoint and pos_a == second[0].position
        assert pos_b < pos_a


def test_a_long_open_transaction_does_not_stall_readers(pg_backend: Backend) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, caller_connection(pg_backend) as long:
        alkstore.append(long, Written(writer=0, seq=0), namespace=ns)  # open all along

        after = 0
        read: list[alkstore.LogEntry] = []
        for seq in range(100):
            with store.transaction() as tx:
                tx.append(Written(writer=1, seq=seq))
            if seq % 10 == 9:  # the reader keeps up while the long transaction is open
                entries = store.log.read(after=after, limit=500)
                assert ids(entries) == [(1, s) for s in range(seq - 9, seq + 1)]
                read += entries
                after = entries[-1].position
        assert [e.position for e in read] == list(range(1, 101))
        assert store.log.head() == 100
        assert store.log.read(after=after) == []

        long.commit()
        last = store.log.read(after=after)
        assert ids(last) == [(0, 0)]
        assert last[0].position == 101
        assert store.log.head() == 101


def test_an_event_in_a_rolled_back_savepoint_never_appears(pg_backend: Backend) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, caller_connection(pg_backend) as conn:
        with conn.transaction():
            alkstore.append(conn, Written(writer=1, seq=0), namespace=ns)
            with pytest.raises(Boom), conn.transaction():  # a savepoint, rolled back
                alkstore.append(conn, Written(writer=1, seq=1), namespace=ns)
                raise Boom
            with conn.transaction():  # a savepoint, released
                alkstore.append(conn, Written(writer=1, seq=2), namespace=ns)
            alkstore.append(conn, Written(writer=1, seq=3), namespace=ns)

        # The same through a store transaction, on its raw connection.
        with store.transaction() as tx:
            tx.append(Written(writer=2, seq=0))
            with pytest.raises(Boom), tx.connection.transaction():
                tx.append(Written(writer=2, seq=1))
                raise Boom
            tx.append(Written(writer=2, seq=2))

        entries = store.log.read()
        assert ids(entries) == [(1, 0), (1, 2), (1, 3), (2, 0), (2, 2)]
        assert [e.position for e in entries] == [1, 2, 3, 4, 5]
        assert store.log.head() == 5
        stored = [(writer, seq) for _, _, writer, seq in rows_by_id(pg_backend)]
        assert stored == ids(entries), "rolled-back savepoints left no rows"
