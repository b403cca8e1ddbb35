"""`python -m examples.fastapi_orders --db postgresql://... [--namespace NS]`: a FastAPI
service whose data layer is SQLAlchemy's `AsyncSession` (psycopg 3), with the outbox on
the session itself (`alkstore.append` / `alkstore.enqueue`, docs/adr/0024).

- `POST /orders {"email": ..., "total_cents": ...}`: the ORM adds the order, the session
  flushes it (its id), and the `OrderPlaced` event and a `receipts` job are written in
  the transaction SQLAlchemy has open: one commit. An order over the credit limit raises
  inside `session.begin()`: the row, the event and the job all roll back.
- A worker consumes `receipts` afterwards through the async store API.

PostgreSQL only: SQLAlchemy's SQLite driver is the standard library's sqlite3, which
alkstore refuses (`UnsupportedConnection`, docs/adr/0024). The runner serves the app
with uvicorn on a free local port, posts three orders, drains the receipts and prints
what is in the store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import urllib.error
import urllib.request

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import BigInteger, Identity, Integer, String, func, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import alkstore

CREDIT_LIMIT_CENTS = 100_000
ORDERS = [("ada@example.com", 1_250), ("edsger@example.com", 250_000), ("grace@example.com", 99)]


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "fastapi_orders"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    email: Mapped[str] = mapped_column(String)
    total_cents: Mapped[int] = mapped_column(Integer)


class OrderPlaced(alkstore.Event, tag="fastapi_orders.placed"):
    order_id: int
    email: str
    total_cents: int


class NewOrder(BaseModel):
    email: str
    total_cents: int = Field(gt=0)


class Declined(Exception):
    pass


def create_app(engine: AsyncEngine, namespace: str) -> FastAPI:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def place_order(new: NewOrder) -> dict[str, int]:
        async with sessions() as session:
            try:
                async with session.begin():  # commits the row, the event and the job
                    order = Order(email=new.email, total_cents=new.total_cents)
                    session.add(order)
                    await session.flush()  # the order's id
                    placed = OrderPlaced(
                        order_id=order.id, email=order.email, total_cents=order.total_cents
                    )
                    await alkstore.append(
                        session, placed, key=f"order-{order.id}", namespace=namespace
                    )
                    await alkstore.enqueue(
                        session, "receipts", {"order_id": order.id, "email": order.email},
                        namespace=namespace,
                    )  # fmt: skip
                    if order.total_cents > CREDIT_LIMIT_CENTS:  # rolls all three back
                        raise Declined(
                            f"order {order.id}: {order.total_cents} cents is over the credit limit"
                        )
            except Declined as exc:
                raise HTTPException(status_code=402, detail=str(exc)) from exc
        return {"order_id": order.id}

    return app


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def run(url: str, namespace: str) -> None:
    async with await alkstore.open_async(url, namespace=namespace) as store:
        await store.migrate()
        engine = create_async_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(engine, namespace), log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        for email, total in ORDERS:  # the HTTP client is blocking: off the loop
            status, answer = await asyncio.to_thread(
                post, f"http://127.0.0.1:{port}/orders", {"email": email, "total_cents": total}
            )
            print(f"POST /orders {email} {total} -> {status} {answer}")
        server.should_exit = True
        await serving
        receipts = store.queue("receipts")
        while job := await receipts.claim(visibility=30):
            print(f"receipt for order {job.payload['order_id']} sent to {job.payload['email']}")
            await job.ack()
        async with engine.connect() as conn:
            rows = (await conn.execute(select(func.count()).select_from(Order))).scalar_one()
        await engine.dispose()
        head = await store.run(store.sync.log.head)
        print(f"fastapi_orders: {rows} rows; log head {head}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.fastapi_orders", description=__doc__)
    parser.add_argument("--db", required=True, help="a postgresql:// URL")
    parser.add_argument("--namespace", default="alkstore")
    args = parser.parse_args(argv)
    asyncio.run(run(args.db, args.namespace))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
