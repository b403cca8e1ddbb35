"""examples/async_service.py as a user runs it, on both engines: an asyncio service on the
async store API (HTTP under uvicorn, a consumer task on the same loop), one command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_examples import Place, pg_place, rows, run
from tests.conftest import Backend


@pytest.fixture
def place(backend: Backend, tmp_path: Path) -> Iterator[Place]:
    if backend.name == "sqlite":
        yield Place([], f"sqlite:///{tmp_path / 'alkstore.db'}", "alkstore")
        return
    with pg_place(backend) as found:
        yield found


def test_the_async_service_runs_in_one_command(place: Place, tmp_path: Path) -> None:
    out = run(tmp_path, "-m", "examples.async_service", *place.args).stdout
    second = 2 if place.url.startswith("sqlite") else 3  # a rolled-back identity is spent
    assert out.splitlines() == [
        "POST /orders ada@example.com 1250 -> 201 {'order_id': 1}",
        "POST /orders edsger@example.com 250000 -> 402 "
        "{'error': 'order 2: 250000 cents is over the credit limit'}",
        f"POST /orders grace@example.com 99 -> 201 {{'order_id': {second}}}",
        "receipt for order 1 sent to ada@example.com",
        f"receipt for order {second} sent to grace@example.com",
        "async_orders: 2 rows; log head 2; receipts ready 0",
    ]
    with place.store() as store:  # what the service left, read with the sync API
        assert [(e.type, e.key) for e in store.log.read(after=0, limit=10)] == [
            ("async_orders.placed", "order-1"),
            ("async_orders.placed", f"order-{second}"),
        ]
        assert rows(store, "SELECT id, total_cents FROM async_orders ORDER BY id") == [
            (1, 1250),
            (second, 99),
        ]
        stats = store.queue("receipts").stats()
        assert (stats.ready, stats.active, stats.dead) == (0, 0, 0)
