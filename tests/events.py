"""Event types shared by the tests (importable from subprocesses too)."""

from __future__ import annotations

import alkstore


class OrderPlaced(alkstore.Event, tag="test.order_placed"):
    order_id: int
    total_cents: int = 0


class Written(alkstore.Event, tag="test.written"):
    writer: int
    seq: int


class Basket(alkstore.Event, tag="test.basket"):
    items: list[int]
