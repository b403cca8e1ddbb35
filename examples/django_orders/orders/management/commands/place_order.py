"""`manage.py place_order EMAIL TOTAL_CENTS`: place an order, print its id."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from examples.django_orders.orders import shop


class Command(BaseCommand):
    help = "Place an order: the row, its event and its receipt job in one transaction."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("total_cents", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            order = shop.place_order(options["email"], options["total_cents"])
        except shop.OverCreditLimit as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"order {order.id} placed")
