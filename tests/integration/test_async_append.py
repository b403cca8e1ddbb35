"""psycopg AsyncConnection: `await alkstore.append(...)` on a connection the app owns."""

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
