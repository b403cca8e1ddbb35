"""examples/fastapi_orders.py as a user runs it (PostgreSQL): FastAPI with SQLAlchemy's
AsyncSession, the event and the job written on the session (docs/adr/0024): the order
row, the event and the job commit together, and a declined order leaves none of them."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_examples import pg_place, rows, run
from tests.conftest import Backend


def test_the_fastapi_service_writes_the_outbox_on_its_session(
    pg_backend: Backend, tmp_path: Path
) -> None:
    with pg_place(pg_backend) as place:
        out = run(tmp_path, "-m", "examples.fastapi_orders", *place.args).stdout
        assert out.splitlines() == [
            "POST /orders ada@example.com 1250 -> 201 {'order_id': 1}",
            "POST /orders edsger@example.com 250000 -> 402 "
            "{'detail': 'order 2: 250000 cents is over the credit limit'}",
            "POST /orders grace@example.com 99 -> 201 {'order_id': 3}",
            "receipt for order 1 sent to ada@example.com",
            "receipt for order 3 sent to grace@example.com",
            "fastapi_orders: 2 rows; log head 2",
        ]
        with place.store() as store:
            entries = store.log.read(after=0, limit=10)
            assert [(e.type, e.key) for e in entries] == [
                ("fastapi_orders.placed", "order-1"),
                ("fastapi_orders.placed", "order-3"),
            ]
            assert rows(store, "SELECT id, total_cents FROM fastapi_orders ORDER BY id") == [
                (1, 1250),
                (3, 99),
            ]
            stats = store.queue("receipts").stats()
            assert (stats.ready, stats.active, stats.dead) == (0, 0, 0)
