"""`python -m examples.producer [--db URL] [--namespace NS]`: a producer only.

An application that already holds its own connection and transaction (psycopg on
PostgreSQL, apsw on SQLite) appends events on it with `alkstore.append(conn, event)`:
they commit or roll back with its own writes. Nothing else runs here: the events wait in
the log until a relay (`alkstore relay`, wherever it runs) turns them into jobs.
"""

from __future__ import annotations

import argparse
import os
from contextlib import AbstractContextManager
from typing import Any

import apsw
import psycopg

import alkstore


class InvoiceIssued(alkstore.Event, tag="invoices.issued"):
    invoice_id: int
    customer: str
    amount_cents: int


class Refused(Exception):
    pass


INVOICES = {  # the application's own table
    "sqlite": """CREATE TABLE IF NOT EXISTS invoices (id INTEGER PRIMARY KEY,
        customer TEXT NOT NULL, amount_cents INTEGER NOT NULL)""",
    "postgres": """CREATE TABLE IF NOT EXISTS invoices (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        customer text NOT NULL, amount_cents integer NOT NULL)""",
}


def issue_invoice(conn: psycopg.Connection | apsw.Connection, namespace: str, customer: str,
                  cents: int) -> int:  # fmt: skip
    """The invoice row and its event, in the application's transaction on its connection."""
    if isinstance(conn, psycopg.Connection):
        transaction: AbstractContextManager[object] = conn.transaction()
        insert = "INSERT INTO invoices (customer, amount_cents) VALUES (%s, %s) RETURNING id"
    else:  # apsw: `with conn:` is a transaction
        transaction = conn
        insert = "INSERT INTO invoices (customer, amount_cents) VALUES (?, ?) RETURNING id"
    with transaction:
        cursor: Any = conn.execute(insert, (customer, cents))  # psycopg's or apsw's
        [(invoice_id,)] = cursor.fetchall()
        event = InvoiceIssued(invoice_id=invoice_id, customer=customer, amount_cents=cents)
        alkstore.append(conn, event, key=f"invoice-{invoice_id}", namespace=namespace)
        if cents <= 0:  # raising rolls back the row and the event together
            raise Refused(f"invoice {invoice_id}: amount must be positive")
    return int(invoice_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.producer", description=__doc__)
    parser.add_argument("--db", help="default: $ALKSTORE_DB, else sqlite:///alkstore.db")
    parser.add_argument("--namespace", help="default: $ALKSTORE_NAMESPACE, else alkstore")
    args = parser.parse_args(argv)
    url = args.db or os.environ.get("ALKSTORE_DB") or "sqlite:///alkstore.db"

    # Deploy-time set-up, once (in production: `alkstore migrate`, and the subscriptions
    # where the consumers are deployed). alkstore.append takes the namespace explicitly.
    store = alkstore.connect(url, namespace=args.namespace)
    namespace = store.namespace
    store.migrate()
    store.subscribe("billing", ["invoices.*"])
    start = store.log.head()

    conn: psycopg.Connection | apsw.Connection  # the application's own connection
    if store.engine.name == "postgres":
        conn = psycopg.connect(url)
        conn.execute(INVOICES["postgres"])
        conn.commit()
    else:
        conn = apsw.Connection(url.removeprefix("sqlite:///"))
        conn.execute(INVOICES["sqlite"])  # apsw autocommits outside `with conn:`

    for customer, cents in [("acme", 12_000), ("globex", -500), ("initech", 4_200)]:
        try:
            print(f"invoice {issue_invoice(conn, namespace, customer, cents)} issued to {customer}")
        except Refused as exc:
            print(f"rolled back, no row and no event: {exc}")

    for entry in store.log.read(after=start, limit=100):
        print(f"log position {entry.position}: {entry.type} key {entry.key} {entry.payload}")
    (lag,) = [s for s in store.status().subscriptions if s.queue == "billing"]
    print(f"billing: {lag.events} events for a relay to turn into jobs")
    conn.close()
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
