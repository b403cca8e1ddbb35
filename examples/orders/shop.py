"""The order service's domain: its events, its own `orders` table, placing an order (the
business row and the event in one transaction) and the one-time set-up."""

from __future__ import annotations

import alkstore


class OrderPlaced(alkstore.Event, tag="orders.placed"):
    order_id: int
    email: str
    total_cents: int


class ReportDue(alkstore.Event, tag="orders.report_due"):
    pass


CREDIT_LIMIT_CENTS = 100_000

# The application's own table, beside alkstore's (which live in their namespace).
ORDERS_TABLE = {
    "sqlite": """CREATE TABLE IF NOT EXISTS orders (
        id INTEGER PRIMARY KEY, email TEXT NOT NULL, total_cents INTEGER NOT NULL)""",
    "postgres": """CREATE TABLE IF NOT EXISTS orders (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        email text NOT NULL, total_cents integer NOT NULL)""",
}
INSERT_ORDER = {  # apsw and psycopg spell parameters differently
    "sqlite": "INSERT INTO orders (email, total_cents) VALUES (?, ?) RETURNING id",
    "postgres": "INSERT INTO orders (email, total_cents) VALUES (%s, %s) RETURNING id",
}
ORDER_EMAIL = {
    "sqlite": "SELECT email FROM orders WHERE id = ?",
    "postgres": "SELECT email FROM orders WHERE id = %s",
}


class Declined(Exception):
    """The order was refused; its row and its event were rolled back together."""


def place_order(store: alkstore.Store, email: str, total_cents: int) -> int:
    """Write the order row and append `OrderPlaced` in one transaction; returns the id."""
    with store.transaction() as tx:
        cursor = tx.connection.execute(INSERT_ORDER[store.engine.name], (email, total_cents))
        [(order_id,)] = cursor.fetchall()  # read to the end: SQLite cannot commit before
        tx.append(
            OrderPlaced(order_id=order_id, email=email, total_cents=total_cents),
            key=f"order-{order_id}",
        )
        if total_cents > CREDIT_LIMIT_CENTS:  # raising rolls back the row and the event
            raise Declined(f"order {order_id}: {total_cents} cents is over the credit limit")
    return int(order_id)


def order_email(store: alkstore.Store, order_id: int) -> str:
    """The order's e-mail address as it is now (someone may have corrected it)."""
    with store.transaction() as tx:
        [(email,)] = tx.connection.execute(ORDER_EMAIL[store.engine.name], (order_id,)).fetchall()
    return str(email)


def setup(store: alkstore.Store) -> None:
    """Tables, subscriptions and the report schedule; safe to run again."""
    store.migrate()
    with store.transaction() as tx:
        tx.connection.execute(ORDERS_TABLE[store.engine.name])
    store.subscribe(
        "confirmations",
        ["orders.placed"],
        max_attempts=3,
        backoff=alkstore.Exponential(initial=0.25, factor=2, max=5),
    )
    store.subscribe("reports", ["orders.report_due"])
    if "sales_report" not in {s.name for s in store.schedules.list()}:
        store.schedules.add("sales_report", every="2s", event=ReportDue())
