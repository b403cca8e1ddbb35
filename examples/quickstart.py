"""The quick start: a business write and an event, committed together, then read back.

Run it with `python examples/quickstart.py` (embedded SQLite, ./alkstore.db) or
set ALKSTORE_DB=postgresql://... to run it on PostgreSQL.
"""

from __future__ import annotations

import alkstore


class OrderPlaced(alkstore.Event, tag="order.placed"):
    order_id: int
    total_cents: int


def main() -> None:
    store = alkstore.connect()  # $ALKSTORE_DB, or the embedded sqlite:///alkstore.db
    store.migrate()
    with store.transaction() as tx:
        tx.connection.execute(
            "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total_cents INTEGER)"
        )
    start = store.log.head()

    with store.transaction() as tx:  # the business row and the event commit together
        order_id = start + 1
        tx.connection.execute(f"INSERT INTO orders VALUES ({order_id}, 999)")
        tx.append(OrderPlaced(order_id=order_id, total_cents=999), key=f"order-{order_id}")

    try:
        with store.transaction() as tx:  # a rollback leaves no trace, in either table
            tx.append(OrderPlaced(order_id=-1, total_cents=0))
            raise RuntimeError("payment declined")
    except RuntimeError:
        pass

    for entry in store.log.read(after=start):
        print(f"position {entry.position}: {entry.type} key={entry.key} {entry.payload}")
    store.close()


if __name__ == "__main__":
    main()
