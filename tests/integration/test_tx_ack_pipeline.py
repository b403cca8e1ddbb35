"""job.transaction() on PostgreSQL sends the fenced ack with COMMIT, in one pipeline
(ADR 0022): a refused ack aborts the pipeline so COMMIT never runs; the events appended in
the block go with it; the connection goes back to the pool fit for the next transaction.
Behind a transaction-mode pooler (unnamed statements) the same holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from alkstore import _engine
from tests import pgbouncer
from tests.business import Business
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pg_store(pg_backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with pg_backend.migrated(pool_size=1, clock=clock) as store:  # one connection: reused
        yield store


def _stale_and_fresh(store: alkstore.Store, clock: Clock) -> tuple[Any, Any]:
    q = store.queue("orders")
    q.enqueue({"n": 1})
    stale = q.claim(visibility=1)
    clock.ms += 2_000
    fresh = q.claim()
    assert stale is not None and fresh is not None and fresh.id == stale.id
    return stale, fresh


def _ack_round(store: alkstore.Store, clock: Clock) -> None:
    business = Business(store)
    stale, fresh = _stale_and_fresh(store, clock)
    statements: list[str] = []
    engine: Any = store.engine
    real = engine.run_in

    def run_in(conn: Any, name: str, params: dict[str, Any]) -> Any:
        statements.append(name)
        return real(conn, name, params)

    engine.run_in = run_in
    with pytest.raises(alkstore.LeaseLost) as lost, stale.transaction() as tx:
        business.write(tx, stale.id, "stale")
        tx.append(OrderPlaced(order_id=1, total_cents=1))
    assert isinstance(lost.value.__cause__, _engine.AckRefused), "refused at COMMIT"
    assert statements == [], "no statement of its own: it rode with COMMIT"
    assert business.rows() == {} and store.log.read() == []
    with fresh.transaction() as tx:  # the same (only) connection, fit again
        business.write(tx, fresh.id, "fresh")
        tx.append(OrderPlaced(order_id=2, total_cents=2))
    assert statements == []
    assert business.rows() == {fresh.id: "fresh"}
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=2, total_cents=2)]


def test_the_fenced_ack_rides_with_commit(pg_store: alkstore.Store, clock: Clock) -> None:
    _ack_round(pg_store, clock)


def test_behind_a_pooler_too(
    bouncer: pgbouncer.PgBouncer, pg_backend: Backend, clock: Clock
) -> None:
    with pg_backend.migrated():
        pass
    url = bouncer.url()
    with alkstore.connect(url, namespace=pg_backend.namespace, clock=clock, pool_size=1) as store:
        _ack_round(store, clock)
