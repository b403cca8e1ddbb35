"""The worker: `manage.py alkstore worker examples.django_orders.orders.jobs:worker`: the
receipt jobs `place_order()` enqueued, and the audit jobs the relay made from its events.

Loaded inside manage.py, so Django is set up and the handler uses the ORM; the store is
on Django's database (`relay.django.connect()`)."""

from __future__ import annotations

import logging

from django.db import close_old_connections

import alkstore
import relay
import relay.django
from examples.django_orders.orders.models import Order
from examples.django_orders.orders.shop import AUDIT, RECEIPTS, OrderPlaced

log = logging.getLogger("examples.django_orders")
store = relay.django.connect()
worker = relay.Worker(store)


@worker.handler(RECEIPTS)
def send_receipt(job: alkstore.Job[dict[str, int]]) -> None:
    # Handlers run on the worker's threads, outside Django's request cycle: drop this
    # thread's connection when it is broken or past CONN_MAX_AGE, as a request would.
    close_old_connections()
    try:  # a stand-in for the mail: the handler runs at least once, so it is idempotent
        Order.objects.filter(id=job.payload["order_id"]).update(receipt_sent=True)
    finally:
        close_old_connections()


@worker.handler(AUDIT)
def audit(job: alkstore.Job[OrderPlaced]) -> None:
    # routed by the relay from the log (`manage.py alkstore subscriptions add ...`)
    log.info("audit: order %d, %d cents", job.payload.order_id, job.payload.total_cents)
