"""The `alkstore` command line. Every command takes --db URL (or $ALKSTORE_DB)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType

import msgspec

import alkstore
from relay._relay import Relay
from relay._scheduler import Scheduler
from relay.worker import Worker


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alkstore", description=alkstore.__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db", default=None, help="database URL (default: $ALKSTORE_DB or sqlite:///alkstore.db)"
    )
    common.add_argument("--namespace", default="alkstore", help="schema / table prefix")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", parents=[common], help="create or upgrade alkstore's tables")
    sql = commands.add_parser("sql", parents=[common], help="print the DDL without applying it")
    sql.add_argument(
        "--pending", action="store_true", help="only what `migrate` would run on this database"
    )
    events = commands.add_parser("events", parents=[common], help="read or replay the event log")
    events.add_argument("action", choices=["tail", "replay"])
    events.add_argument("--after", type=int, default=0, help="tail: start after this position")
    events.add_argument("--follow", action="store_true", help="tail: keep waiting for events")
    events.add_argument("--queue", help="replay: the subscription's queue")
    events.add_argument("--from", dest="from_position", type=int, help="replay: first position")
    run = commands.add_parser("relay", parents=[common], help="fan events out into queues")
    run.add_argument("--batch", type=int, default=5_000, help="events per transaction")
    run.add_argument("--lease-ttl", type=float, default=3.0, help="failover bound, seconds")
    run.add_argument("--retention", type=float, help="prune relayed events older than S seconds")
    run.add_argument("-v", "--verbose", action="store_true")
    commands.add_parser("status", parents=[common], help="log head, relay lag, queues")
    sched = commands.add_parser("scheduler", parents=[common], help="fire schedules (standalone)")
    sched.add_argument("--lease-ttl", type=float, default=3.0, help="failover bound, seconds")
    sched.add_argument("-v", "--verbose", action="store_true")
    schedules = commands.add_parser("schedules", parents=[common], help="manage schedules")
    schedules.add_argument("action", choices=["list", "add", "pause", "resume", "remove"])
    schedules.add_argument("name", nargs="?", help="the schedule (all but list)")
    schedules.add_argument("--cron", help='add: a cron expression, e.g. "0 3 * * *"')
    schedules.add_argument("--every", help='add: an interval, e.g. "30s", "5m"')
    schedules.add_argument("--event", help="add: the event class, module:Class")
    schedules.add_argument("--data", default="{}", help="add: the event's fields as JSON")
    schedules.add_argument("--tz", default="UTC", help="add: time zone of the cron expression")
    schedules.add_argument("--catch-up", default="latest", choices=["latest", "all", "none"])
    schedules.add_argument("--key", help="add: the events' key")
    work = commands.add_parser("worker", parents=[common], help="run handlers: MODULE:WORKER")
    work.add_argument("target", help="where the relay.Worker is, e.g. myapp.jobs:worker")
    work.add_argument("--queues", help="comma-separated subset of the handlers' queues")
    work.add_argument("--concurrency", type=int, help="total handlers running at once")
    work.add_argument("--once", action="store_true", help="drain the queues, then exit")
    work.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "worker":
        return _worker(args)
    try:
        store = alkstore.connect(args.db, namespace=args.namespace)
    except alkstore.AlkstoreError as exc:
        print(f"alkstore: {exc}", file=sys.stderr)
        return 2
    try:
        with store:
            return _dispatch(store, args)
    except alkstore.AlkstoreError as exc:
        print(f"alkstore: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _dispatch(store: alkstore.Store, args: argparse.Namespace) -> int:
    if args.command == "migrate":
        applied = store.migrate()
        done = ", ".join(f"{v:04d}" for v in applied) or "nothing to do"
        print(f"migrated {store.namespace}: {done}")
    elif args.command == "sql":
        sys.stdout.write(store.sql(pending_only=args.pending))
    elif args.command == "events" and args.action == "tail":
        _tail(store, args.after, args.follow)
    elif args.command == "events":
        if args.queue is None or args.from_position is None:
            print("alkstore: events replay needs --queue and --from", file=sys.stderr)
            return 2
        store.replay(args.queue, args.from_position)
        print(f"{args.queue}: events from position {args.from_position} will be delivered again")
    elif args.command == "relay":
        _relay(store, args)
    elif args.command == "status":
        _status(store)
    elif args.command == "scheduler":
        _logging(args.verbose)
        scheduler = Scheduler(store, lease_ttl=args.lease_ttl)
        _on_signals(scheduler.stop)
        scheduler.run()
    elif args.command == "schedules":
        return _schedules(store, args)
    return 0


def _schedules(store: alkstore.Store, args: argparse.Namespace) -> int:
    action, name = args.action, args.name
    if action != "list" and not name:
        print(f"alkstore: schedules {action} needs a NAME", file=sys.stderr)
        return 2
    if action == "add":
        if not args.event:
            print("alkstore: schedules add needs --event module:Class", file=sys.stderr)
            return 2
        module_name, _, class_name = args.event.partition(":")
        sys.path.insert(0, os.getcwd())
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            event = msgspec.json.decode(args.data, type=cls)
        except (ImportError, AttributeError, msgspec.DecodeError) as exc:
            print(f"alkstore: cannot build the event {args.event!r}: {exc}", file=sys.stderr)
            return 2
        store.schedules.add(
            name,
            event=event,
            cron=args.cron,
            every=args.every,
            tz=args.tz,
            catch_up=args.catch_up,
            key=args.key,
        )
        print(f"added {name}")
    elif action == "pause":
        store.schedules.pause(name)
        print(f"paused {name}")
    elif action == "resume":
        store.schedules.resume(name)
        print(f"resumed {name}")
    elif action == "remove":
        store.schedules.remove(name)
        print(f"removed {name}")
    for schedule in store.schedules.list() if action in ("list", "add", "resume") else []:
        if action != "list" and schedule.name != name:
            continue
        spec = schedule.cron or f"every {(schedule.every_ms or 0) / 1000:g}s"
        state = (
            "paused"
            if schedule.paused
            else "next "
            + ", ".join(
                t.isoformat() for t in store.schedules.get(schedule.name, upcoming=3).next_fires
            )
        )
        print(f"{schedule.name}\t{spec}\t{schedule.tz}\t{schedule.event_type}\t{state}")
    return 0


def _tail(store: alkstore.Store, after: int, follow: bool) -> None:
    entries = store.log.tail(after) if follow else iter(store.log.read(after, 1_000_000))
    for entry in entries:
        headers = f" {entry.headers}" if entry.headers else ""
        raw = entry.raw if isinstance(entry.raw, str) else entry.raw.decode()
        print(
            f"{entry.position}\t{entry.appended_at.isoformat()}\t{entry.type}\t"
            f"{entry.key or '-'}{headers}\t{raw}",
            flush=True,
        )


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


def _on_signals(stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: stop gracefully. A second one: exit at once."""
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if received:
            os._exit(128 + signum)  # leases expire; the jobs come back
        received.append(signum)
        logging.getLogger("alkstore").info("signal %d: stopping (again to exit now)", signum)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def _worker(args: argparse.Namespace) -> int:
    _logging(args.verbose)
    module_name, _, attr = args.target.partition(":")
    if args.db:
        os.environ["ALKSTORE_DB"] = args.db  # for the module's alkstore.connect()
    os.environ["ALKSTORE_NAMESPACE"] = args.namespace
    try:
        sys.path.insert(0, os.getcwd())
        worker = getattr(importlib.import_module(module_name), attr or "worker")
    except alkstore.AlkstoreError as exc:  # the module's alkstore.connect() refused
        print(f"alkstore: {exc}", file=sys.stderr)
        return 2
    except (ImportError, AttributeError) as exc:
        print(f"alkstore: cannot load {args.target!r}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(worker, Worker):
        print(f"alkstore: {args.target!r} is not a relay.Worker", file=sys.stderr)
        return 2
    if args.concurrency is not None:
        worker.concurrency = args.concurrency
    queues = args.queues.split(",") if args.queues else None
    _on_signals(worker.stop)
    try:
        worker.run(queues=queues, once=args.once)
    except alkstore.AlkstoreError as exc:
        print(f"alkstore: {exc}", file=sys.stderr)
        return 1
    return 0


def _relay(store: alkstore.Store, args: argparse.Namespace) -> None:
    _logging(args.verbose)
    relay = Relay(store, batch=args.batch, lease_ttl=args.lease_ttl, retention=args.retention)
    _on_signals(relay.stop)
    logging.getLogger("alkstore.relay").info(
        "relay starting on %s (namespace %s)", store.engine.name, store.namespace
    )
    relay.run()


def _status(store: alkstore.Store) -> None:
    status = store.status()
    print(f"log head: {status.head}")
    if not status.subscriptions:
        print("subscriptions: none")
    for lag in status.subscriptions:
        age = "caught up" if lag.seconds is None else f"{lag.seconds:.1f}s behind"
        stats = store.queue(lag.queue).stats()
        oldest = "" if stats.oldest_ready_age is None else f", oldest {stats.oldest_ready_age:.1f}s"
        print(
            f"  {lag.queue}: checkpoint {lag.checkpoint}, {lag.events} events / {age}; "
            f"jobs ready {stats.ready}, scheduled {stats.scheduled}, active {stats.active}, "
            f"dead {stats.dead}{oldest}"
        )
    for holdup in status.holdups:
        print(
            f"open writing transaction: pid {holdup.pid}, {holdup.age:.1f}s old, {holdup.state}: "
            f"{holdup.query!r} (its events appear when it commits)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
