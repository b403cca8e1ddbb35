"""`python -m examples.async_service [--db URL] [--namespace NS]`: an asyncio service on
the async store API (`alkstore.open_async`, docs/adr/0025), in one process.

- `POST /orders {"email": ..., "total_cents": ...}` (Starlette): the order row, the
  `OrderPlaced` event and a `receipts` job in one `async with store.transaction()`; an
  order over the credit limit raises inside the block and leaves none of the three.
- A consumer task on the same event loop claims `receipts` jobs, "sends" each receipt
  and acks it; with nothing to do it awaits the store's wake (no polling, no thread of
  its own). Nothing here blocks the event loop.

The runner serves the app with uvicorn on a free local port, posts a few orders, waits
until every receipt is sent, stops and prints what is in the store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import alkstore


class OrderPlaced(alkstore.Event, tag="async_orders.placed"):
    order_id: int
    email: str
    total_cents: int


class Declined(Exception):
    pass


CREDIT_LIMIT_CENTS = 100_000
ORDERS = [("ada@example.com", 1_250), ("edsger@example.com", 250_000), ("grace@example.com", 99)]
TABLE = {
    "sqlite": "CREATE TABLE IF NOT EXISTS async_orders "
    "(id INTEGER PRIMARY KEY, email TEXT NOT NULL, total_cents INTEGER NOT NULL)",
    "postgres": "CREATE TABLE IF NOT EXISTS async_orders (id bigint GENERATED ALWAYS AS "
    "IDENTITY PRIMARY KEY, email text NOT NULL, total_cents integer NOT NULL)",
}
INSERT = {  # apsw and psycopg spell parameters differently
    "sqlite": "INSERT INTO async_orders (email, total_cents) VALUES (?, ?) RETURNING id",
    "postgres": "INSERT INTO async_orders (email, total_cents) VALUES (%s, %s) RETURNING id",
}


async def place_order(store: alkstore.AsyncStore, email: str, total_cents: int) -> int:
    """The row, the event and the receipt job commit together, or not at all."""
    async with store.transaction() as tx:
        [(order_id,)] = await tx.execute(INSERT[store.engine.name], (email, total_cents))
        await tx.append(
            OrderPlaced(order_id=order_id, email=email, total_cents=total_cents),
            key=f"order-{order_id}",
        )
        await tx.enqueue("receipts", {"order_id": order_id, "email": email})
        if total_cents > CREDIT_LIMIT_CENTS:  # raising rolls all three back
            raise Declined(f"order {order_id}: {total_cents} cents is over the credit limit")
    return int(order_id)


async def consume(store: alkstore.AsyncStore, sent: list[str]) -> None:
    """Claim, handle and ack receipts until cancelled; sleep on the wake when idle."""
    queue = store.queue("receipts")
    listener = store.listen()
    while True:
        job = await queue.claim(visibility=30)
        if job is None:
            await listener.wait(1.0)
            continue
        sent.append(f"receipt for order {job.payload['order_id']} sent to {job.payload['email']}")
        await job.ack()


def create_app(store: alkstore.AsyncStore, sent: list[str]) -> Starlette:
    async def post_order(request: Request) -> JSONResponse:
        body = await request.json()
        email, total = body.get("email"), body.get("total_cents")
        if not isinstance(email, str) or not isinstance(total, int) or total <= 0:
            return JSONResponse({"error": "need an email and total_cents > 0"}, status_code=422)
        try:
            order_id = await place_order(store, email, total)
        except Declined as exc:
            return JSONResponse({"error": str(exc)}, status_code=402)
        return JSONResponse({"order_id": order_id}, status_code=201)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        consumer = asyncio.create_task(consume(store, sent))
        yield
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)

    return Starlette(routes=[Route("/orders", post_order, methods=["POST"])], lifespan=lifespan)


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def run(url: str | None, namespace: str | None) -> None:
    async with await alkstore.open_async(url, namespace=namespace) as store:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.execute(TABLE[store.engine.name])
        sent: list[str] = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(store, sent), log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        placed = 0
        for email, total in ORDERS:  # the HTTP client is blocking: off the loop too
            status, answer = await asyncio.to_thread(
                post, f"http://127.0.0.1:{port}/orders", {"email": email, "total_cents": total}
            )
            print(f"POST /orders {email} {total} -> {status} {answer}")
            placed += status == 201
        for _ in range(1000):  # until the consumer sent every receipt (10 s at most)
            if len(sent) >= placed:
                break
            await asyncio.sleep(0.01)
        server.should_exit = True
        await serving
        print("\n".join(sent))
        async with store.transaction() as tx:
            [(rows,)] = await tx.execute("SELECT count(*) FROM async_orders")
        head = await store.run(store.sync.log.head)
        stats = await store.queue("receipts").stats()
        print(f"async_orders: {rows} rows; log head {head}; receipts ready {stats.ready}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.async_service", description=__doc__)
    parser.add_argument("--db", help="default: $ALKSTORE_DB, else sqlite:///alkstore.db")
    parser.add_argument("--namespace", help="default: $ALKSTORE_NAMESPACE, else alkstore")
    args = parser.parse_args(argv)
    asyncio.run(run(args.db, args.namespace))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
