"""`python -m examples.orders [--db URL] [--namespace NS]`: the order service in one process.

It sets the store up, starts the HTTP API (uvicorn), a relay, a scheduler and a worker
as threads, places a few orders over HTTP, waits until every confirmation is sent or
dead-lettered and a sales report ran after the last order, stops everything and prints
what is in the store. `python -m examples.orders setup` only sets the store up, for
running the parts as processes of their own (examples/README.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import uvicorn

import alkstore
import relay
import relay.metrics
from examples.orders import app, jobs, shop, tracing

log = logging.getLogger("examples.orders")

ORDERS = [  # (email, total_cents)
    ("ada@example.com", 1_250),
    ("grace@greylist.example", 4_999),  # refused once, then sent
    ("alan@bounce.example", 800),  # refused on every attempt: a dead letter
    ("edsger@example.com", 250_000),  # over the credit limit: declined, nothing written
    ("barbara@example.com", 3_100),
]


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def settled(store: alkstore.Store, start: int) -> bool:
    """Every event since `start` relayed, no job left to run (acked or dead), and a
    report run after the last order."""
    events = store.log.read(after=start, limit=1_000)
    orders = [e.position for e in events if e.type == "orders.placed"]
    reports = [e.position for e in events if e.type == "orders.report_due"]
    if not reports or max(reports) < max(orders, default=0):
        return False
    if any(lag.checkpoint < events[-1].position for lag in store.status().subscriptions):
        return False
    stats = [store.queue(q).stats() for q in ("confirmations", "reports")]
    return all(s.ready + s.scheduled + s.active == 0 for s in stats)


def summary(store: alkstore.Store, start: int, placed: list[int]) -> None:
    with store.transaction() as tx:
        [(rows,)] = tx.connection.execute("SELECT count(*) FROM orders").fetchall()
    print(f"orders table: {rows} rows; placed now: {placed} (a declined order leaves none)")
    types = [e.type for e in store.log.read(after=start, limit=1_000)]
    print(
        f"log after position {start}: {types.count('orders.placed')} orders.placed, "
        f"{types.count('orders.report_due')} orders.report_due"
    )
    confirmations = store.queue("confirmations")
    s = confirmations.stats()
    print(
        f"queue confirmations: ready {s.ready}, scheduled {s.scheduled}, "
        f"active {s.active}, dead {s.dead}"
    )
    for dead in confirmations.dead_letters():
        order = dead.payload
        print(
            f"dead letter {dead.id}: order {order.order_id} to {order.email}, "
            f"{dead.attempts} attempts: {dead.reason}"
        )
        for attempt in dead.history:
            print(f"  attempt {attempt.attempt} at {attempt.time:%H:%M:%S.%f}: {attempt.error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.orders", description=__doc__)
    parser.add_argument("action", nargs="?", choices=["run", "setup"], default="run")
    parser.add_argument("--db", help="default: $ALKSTORE_DB, else sqlite:///alkstore.db")
    parser.add_argument("--namespace", help="default: $ALKSTORE_NAMESPACE, else alkstore")
    parser.add_argument("--port", type=int, default=0, help="HTTP port (default: a free one)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after S seconds")
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics here (alkstore[metrics])"
    )
    parser.add_argument(
        "--trace", action="store_true", help="record spans (opentelemetry-sdk) and print them"
    )
    args = parser.parse_args(argv)
    spans = tracing.record() if args.trace else None
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(name)-18s %(levelname)-7s %(message)s"
    )

    def connect() -> alkstore.Store:  # one store per part, as separate processes have
        return alkstore.connect(args.db, namespace=args.namespace)

    with connect() as store:
        shop.setup(store)
        if args.action == "setup":
            print(f"set up {store.engine.name} namespace {store.namespace}")
            return 0
        start = store.log.head()

        # The parts: in production each is a process of its own (examples/README.md).
        stores = [connect() for _ in range(4)]
        relayer = relay.Relay(stores[0], schedules=False)  # `alkstore relay` fires schedules
        scheduler = relay.Scheduler(stores[1])  # too; here the scheduler runs on its own
        worker = jobs.build_worker(stores[2])
        config = uvicorn.Config(app.create_app(stores[3]), log_config=None, log_level="warning")
        server = uvicorn.Server(config)
        listening = socket.create_server(("127.0.0.1", args.port))
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/orders"
        threads = [
            threading.Thread(target=relayer.run),
            threading.Thread(target=scheduler.run),
            threading.Thread(target=worker.run),
            threading.Thread(target=server.run, kwargs={"sockets": [listening]}),
        ]
        metrics = None
        if args.metrics_port is not None:
            metrics = relay.metrics.serve(args.metrics_port, "127.0.0.1", stores=[store])
            print(f"metrics at http://127.0.0.1:{metrics.port}/metrics")
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + args.timeout
        placed: list[int] = []
        try:
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.01)
            if not server.started:
                print("the HTTP server did not start", file=sys.stderr)
                return 1
            for email, total in ORDERS:
                status, body = post(url, {"email": email, "total_cents": total})
                log.info("POST /orders %s %d -> %d %s", email, total, status, body)
                if status == 201:
                    placed.append(int(str(body["order_id"])))
            while not settled(store, start):
                if time.monotonic() > deadline:
                    print(f"not done after {args.timeout:g}s", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        finally:
            server.should_exit = True
            for part in (worker, scheduler, relayer):
                part.stop()
            for thread in threads:
                thread.join()
            for each in stores:
                each.close()
            if metrics is not None:
                metrics.close()
        summary(store, start, placed)
        if spans is not None:
            tracing.show(spans)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
