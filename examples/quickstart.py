"""The quick start: a business write and an event commit together; the relay turns the
event into a job; a worker handles it.

Run it with `python examples/quickstart.py` (embedded SQLite, ./alkstore.db), or set
ALKSTORE_DB=postgresql://... to run it on PostgreSQL. In production the relay and the
worker are their own processes: `alkstore relay` and `alkstore worker module:worker`.
"""

from __future__ import annotations

import alkstore
import relay


class OrderPlaced(alkstore.Event, tag="order.placed"):
    order_id: int
    total_cents: int


store = alkstore.connect()  # $ALKSTORE_DB, or the embedded sqlite:///alkstore.db
worker = relay.Worker(store)


@worker.handler("emails", concurrency=4)
def send_confirmation(job: alkstore.Job[OrderPlaced]) -> None:
    order = job.payload
    print(
        f"emails: order {order.order_id} confirmed ({order.total_cents} cents), "
        f"event position {job.position}, attempt {job.attempt}"
    )


def main() -> None:
    store.migrate()
    store.subscribe("emails", ["order.*"], max_attempts=5)
    with store.transaction() as tx:
        tx.connection.execute(
            "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total_cents INTEGER)"
        )
    order_id = store.log.head() + 1

    with store.transaction() as tx:  # the business row and the event commit together
        tx.connection.execute(f"INSERT INTO orders VALUES ({order_id}, 999)")
        tx.append(OrderPlaced(order_id=order_id, total_cents=999), key=f"order-{order_id}")

    try:
        with store.transaction() as tx:  # a rollback leaves no trace, in either table
            tx.append(OrderPlaced(order_id=-1, total_cents=0))
            raise RuntimeError("payment declined")
    except RuntimeError:
        pass

    store.relay_batch()  # one relay step: what `alkstore relay` does continuously
    worker.run(once=True)  # what `alkstore worker examples.quickstart:worker` does
    store.close()


if __name__ == "__main__":
    main()
