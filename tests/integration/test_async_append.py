"""psycopg AsyncConnection: `await alkstore.append(...)` and `await alkstore.enqueue(...)`
on a connection the app owns."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


class Boom(Exception):
    pass


def test_async_append_commits_rolls_back_and_refuses_autocommit(pg_backend: Backend) -> None:
    store = pg_backend.connect()
    store.migrate()
    ns = pg_backend.namespace

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(pg_backend.url) as conn:
            async with conn.transaction():
                await alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
            with pytest.raises(Boom):
                async with conn.transaction():
                    await alkstore.append(conn, OrderPlaced(order_id=2), namespace=ns)
                    raise Boom
            await conn.set_autocommit(True)
            with pytest.raises(alkstore.NotInTransaction):
                await alkstore.append(conn, OrderPlaced(order_id=3), namespace=ns)

    try:
        asyncio.run(main())
        assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=1)]
    finally:
        store.close()


class Counted(alkstore.Event, tag="test.async_counted"):
    n: int


def test_async_append_checks_events_before_anything_is_sent(pg_backend: Backend) -> None:
    """The async path refuses what `tx.append` refuses (issue 14; docs/adr/0003 addendum)."""
    store = pg_backend.connect()
    store.migrate()
    ns = pg_backend.namespace
    bad: list[tuple[alkstore.Event, type[Exception], int]] = [
        (Counted(n="notint"), alkstore.InvalidPayload, 1000),  # type: ignore[arg-type]
        (Counted(n=float("nan")), alkstore.InvalidPayload, 1000),  # type: ignore[arg-type]
        (OrderPlaced(order_id=1), alkstore.PayloadTooLarge, 40),
    ]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(pg_backend.url) as conn:
            for event, error, limit in bad:
                async with conn.transaction():
                    with pytest.raises(error):
                        await alkstore.append(conn, event, namespace=ns, max_payload_bytes=limit)
                    await alkstore.append(conn, OrderPlaced(order_id=2), namespace=ns)

    try:
        asyncio.run(main())
        assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=2)] * 3
    finally:
        store.close()


def test_async_enqueue_joins_the_transaction(pg_backend: Backend) -> None:
    """`await alkstore.enqueue(conn, ...)`: commit, rollback, savepoint, a duplicate that
    does not abort the transaction, autocommit refused (docs/adr/0024)."""
    store = pg_backend.connect()
    store.migrate()
    ns = pg_backend.namespace

    async def main() -> list[int | None]:
        async with await psycopg.AsyncConnection.connect(pg_backend.url) as conn:
            async with conn.transaction():
                kept = await alkstore.enqueue(conn, "mail", "kept", namespace=ns, dedupe_key="d")
                with pytest.raises(alkstore.DuplicateJob):
                    await alkstore.enqueue(conn, "mail", "dup", namespace=ns, dedupe_key="d")
                with pytest.raises(Boom):
                    async with conn.transaction():  # a savepoint
                        await alkstore.enqueue(conn, "mail", "savepoint", namespace=ns)
                        raise Boom
            with pytest.raises(Boom):
                async with conn.transaction():
                    await alkstore.enqueue(conn, "mail", "raised", namespace=ns)
                    raise Boom
            async with conn.pipeline(), conn.transaction():  # the application's pipeline
                piped = await alkstore.enqueue(conn, "mail", "piped", namespace=ns)
            await conn.set_autocommit(True)
            with pytest.raises(alkstore.NotInTransaction):
                await alkstore.enqueue(conn, "mail", "autocommit", namespace=ns)
            return [kept, piped]

    try:
        ids = asyncio.run(main())
        jobs = store.queue("mail").jobs()
        assert [(j.id, j.raw) for j in jobs] == list(zip(ids, ['"kept"', '"piped"'], strict=True))
    finally:
        store.close()
