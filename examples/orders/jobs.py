"""The worker's handlers: an order confirmation by mail, and the sales report.

A handler that returns acks its job; one that raises is retried on the queue's backoff
curve and, after its last attempt, moved to the dead letters with the error
(docs/adr/0008). Handlers run at least once: the mail could go out twice if a worker
died between sending and acking, so a real one would pass the job id to the mail
provider as an idempotency key.
"""

from __future__ import annotations

import logging

import alkstore
import relay
from examples.orders import shop
from examples.orders.shop import OrderPlaced, ReportDue

log = logging.getLogger("examples.orders")


class MailRejected(Exception):
    """What the mail server answered."""


def send_mail(to: str, subject: str, attempt: int) -> None:
    """A stand-in for an SMTP server: bounce.example refuses every message for good, and
    greylist.example the first try of each, as greylisting servers do."""
    if to.endswith("@bounce.example"):
        raise MailRejected(f"550 mailbox unavailable: {to}")
    if to.endswith("@greylist.example") and attempt == 1:
        raise MailRejected(f"451 greylisted, try again later: {to}")


def build_worker(store: alkstore.Store) -> relay.Worker:
    worker = relay.Worker(store)

    @worker.handler("confirmations", concurrency=4)
    def confirm(job: alkstore.Job[OrderPlaced]) -> None:
        order = job.payload
        # the address as it is now: after a bounce, someone may have corrected it and
        # requeued the dead letter
        email = shop.order_email(store, order.order_id)
        send_mail(email, f"Order {order.order_id} confirmed", job.attempt)
        log.info(
            "confirmation for order %d sent to %s (attempt %d)", order.order_id, email, job.attempt
        )

    @worker.handler("reports", concurrency=1)
    def report(job: alkstore.Job[ReportDue]) -> None:
        with store.transaction() as tx:  # the application's own table, read in a handler
            [(count, total)] = tx.connection.execute(
                "SELECT count(*), coalesce(sum(total_cents), 0) FROM orders"
            ).fetchall()
        log.info("sales report: %d orders, %.2f in total", count, total / 100)

    return worker
