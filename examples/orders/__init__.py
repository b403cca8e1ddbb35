"""An order service: an HTTP API that writes an order row and appends `OrderPlaced` in one
transaction, a relay, a worker that sends confirmations (one address always bounces), and
a report on a schedule.

- `shop`: the events, the application's `orders` table, placing an order, the set-up;
- `app`: the HTTP API (Starlette);
- `jobs`: the worker's handlers; `worker`: the worker for `alkstore worker`;
- `__main__`: `python -m examples.orders` runs everything in one process and reports.

See examples/README.md for running the parts as separate processes.
"""
