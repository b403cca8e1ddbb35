"""Placing an order: the row, its event and its receipt job commit together.

Everything runs on Django's own connection inside `transaction.atomic()`:
`alkstore.append` and `alkstore.enqueue` join the transaction the block opened, so
no `transaction.on_commit` hook is needed, and an exception anywhere in the block
(here: the credit limit, checked after the writes) leaves none of the three behind.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction

import alkstore
from examples.django_orders.orders.models import Order

RECEIPTS = "orders.receipt"  # enqueued by place_order()
# fed by the relay: `manage.py alkstore subscriptions add orders.audit 'django_orders.*'`
AUDIT = "orders.audit"
CREDIT_LIMIT_CENTS = 100_000


class OrderPlaced(alkstore.Event, tag="django_orders.order_placed"):
    order_id: int
    total_cents: int


class OverCreditLimit(Exception):
    pass


def place_order(email: str, total_cents: int, reference: str | None = None) -> Order:
    namespace = settings.ALKSTORE_NAMESPACE
    with transaction.atomic():
        order: Order = Order.objects.create(
            email=email, total_cents=total_cents, reference=reference
        )
        event = OrderPlaced(order_id=order.id, total_cents=total_cents)
        alkstore.append(connection, event, key=f"order-{order.id}", namespace=namespace)
        alkstore.enqueue(connection, RECEIPTS, {"order_id": order.id}, namespace=namespace)
        if total_cents > CREDIT_LIMIT_CENTS:
            raise OverCreditLimit(f"{total_cents} cents is over the credit limit")
    return order
