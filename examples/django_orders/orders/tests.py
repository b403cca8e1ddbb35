"""The outbox on Django's connection, run by Django's test runner on PostgreSQL:
`python -m examples.django_orders.manage test examples.django_orders.orders`.

TransactionTestCase, not TestCase: these tests are about what commits, and TestCase
wraps each test in a transaction that never does. alkstore's tables are not Django's,
so each test reads the log after the head it found and empties the receipts queue."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any, ClassVar

from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, connections, transaction
from django.test import TransactionTestCase

import alkstore
import relay.django
from examples.django_orders.orders import shop
from examples.django_orders.orders.models import Order


class Boom(Exception):
    pass


class OutboxOnDjangosConnection(TransactionTestCase):
    store: ClassVar[alkstore.Store]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        with redirect_stdout(io.StringIO()):
            call_command("alkstore", "migrate")  # on the test database Django made
        cls.store = relay.django.connect()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.store.close()
        super().tearDownClass()

    def setUp(self) -> None:
        self.head = self.store.log.head()
        self.store.queue(shop.RECEIPTS).purge()

    def written(self) -> tuple[list[int], list[Any], list[Any]]:
        """Orders, events and receipt jobs since the test began."""
        events = [e.payload for e in self.store.log.read(after=self.head)]
        jobs = [job.raw for job in self.store.queue(shop.RECEIPTS).jobs()]
        return list(Order.objects.order_by("id").values_list("id", flat=True)), events, jobs

    def test_the_row_the_event_and_the_job_commit_together(self) -> None:
        order = shop.place_order("ann@example.com", 1250)
        orders, events, jobs = self.written()
        self.assertEqual(orders, [order.id])
        self.assertEqual(events, [shop.OrderPlaced(order_id=order.id, total_cents=1250)])
        self.assertEqual([j.replace(" ", "") for j in jobs], [f'{{"order_id":{order.id}}}'])

    def test_an_exception_in_the_block_leaves_none_of_them(self) -> None:
        with self.assertRaises(shop.OverCreditLimit):
            shop.place_order("bob@example.com", shop.CREDIT_LIMIT_CENTS + 1)
        self.assertEqual(self.written(), ([], [], []))

    def test_set_rollback_takes_them_away(self) -> None:
        with transaction.atomic():
            shop.place_order("cy@example.com", 100)
            transaction.set_rollback(True)
        self.assertEqual(self.written(), ([], [], []))

    def test_a_nested_atomic_is_a_savepoint_for_them_too(self) -> None:
        with transaction.atomic():
            kept = shop.place_order("dee@example.com", 100)
            with self.assertRaises(shop.OverCreditLimit):
                shop.place_order("eve@example.com", shop.CREDIT_LIMIT_CENTS + 1)  # a savepoint
        orders, events, jobs = self.written()
        self.assertEqual(orders, [kept.id])
        self.assertEqual(events, [shop.OrderPlaced(order_id=kept.id, total_cents=100)])
        self.assertEqual(len(jobs), 1)

    def test_a_failing_write_after_the_event_rolls_the_event_back(self) -> None:
        """Django writes at once (no unit of work to flush): a row that fails after the
        event, here on a unique reference, aborts the whole block with the event."""
        first = shop.place_order("fay@example.com", 100, reference="r-1")
        with self.assertRaises(IntegrityError), transaction.atomic():
            alkstore.append(connection, shop.OrderPlaced(order_id=0, total_cents=1))
            alkstore.enqueue(connections["default"], shop.RECEIPTS, {"order_id": 0})
            Order.objects.create(email="gus@example.com", total_cents=1, reference="r-1")
        orders, events, jobs = self.written()
        self.assertEqual(orders, [first.id])
        self.assertEqual(events, [shop.OrderPlaced(order_id=first.id, total_cents=100)])
        self.assertEqual(len(jobs), 1)

    def test_outside_atomic_it_is_refused_not_autocommitted(self) -> None:
        with self.assertRaises(alkstore.NotInTransaction):
            alkstore.append(connection, shop.OrderPlaced(order_id=1, total_cents=1))
        with self.assertRaises(alkstore.NotInTransaction):
            alkstore.enqueue(connection, shop.RECEIPTS, {"order_id": 1})
        self.assertEqual(self.written(), ([], [], []))

    def test_a_block_django_marked_for_rollback_is_refused(self) -> None:
        with transaction.atomic():
            try:
                with transaction.atomic(savepoint=False):
                    raise Boom
            except Boom:
                pass
            with self.assertRaises(alkstore.NotInTransaction):
                alkstore.enqueue(connection, shop.RECEIPTS, {"order_id": 1})
        self.assertEqual(self.written(), ([], [], []))

    def test_manage_py_alkstore_runs_the_command_line_on_djangos_database(self) -> None:
        shop.place_order("hal@example.com", 100)
        out = io.StringIO()
        with redirect_stdout(out):
            call_command("alkstore", "status", "--json")
        self.assertIn(shop.RECEIPTS, out.getvalue())
        with (
            self.assertRaises(SystemExit) as exit_,
            redirect_stdout(io.StringIO()),
            redirect_stderr(io.StringIO()),
        ):
            call_command("alkstore", "queues", "show", "no-such-queue")
        self.assertNotEqual(exit_.exception.code, 0)
        with self.assertRaisesMessage(CommandError, "no database 'elsewhere'"):
            call_command("alkstore", "--database", "elsewhere", "status")
