"""The commands that run until stopped: relay, scheduler, worker. Each refuses an
unreachable or unmigrated database at startup in one line (ADR 0015); once running,
database errors are logged and retried with backoff."""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import alkstore
from relay import _checks
from relay._relay import Relay
from relay._scheduler import Scheduler
from relay.cli import _live
from relay.cli._commands import UsageError
from relay.metrics import serve as serve_metrics
from relay.worker import Worker

_TARGET = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?")


class LoadError(Exception):
    """The worker module could not be loaded: (exit 2, one line)."""


def logs(verbosity: int) -> None:
    """INFO by default (starts, stops, leadership, retries, dead letters); -v: alkstore's
    DEBUG lines (every job, every relay batch); -vv: every library's DEBUG lines."""
    logging.basicConfig(
        level=logging.DEBUG if verbosity >= 2 else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("alkstore").setLevel(logging.DEBUG if verbosity else logging.INFO)


@contextmanager
def serving_metrics(args: argparse.Namespace) -> Iterator[None]:
    """`--metrics-port`: serve this process's metrics while the block runs (ADR 0019)."""
    if args.metrics_port is None:
        yield
        return
    try:
        server = serve_metrics(args.metrics_port)
    except alkstore.ConfigurationError as exc:  # no prometheus_client, or a port in use
        raise UsageError(str(exc)) from None
    try:
        yield
    finally:
        server.close()


def on_signals(stop: Callable[[], None]) -> None:
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


def relay(store: alkstore.Store, args: argparse.Namespace) -> int:
    logs(args.verbose)
    process = Relay(store, batch=args.batch, lease_ttl=args.lease_ttl, sink_batch=args.sink_batch)
    for name, value in _live.retention_options(args).items():
        setattr(process, name, _checks.retention(name, value))
    on_signals(process.stop)
    logging.getLogger("alkstore.relay").info(
        "relay starting on %s (namespace %s)", store.engine.name, store.namespace
    )
    with serving_metrics(args):
        process.run()
    return 0


def scheduler(store: alkstore.Store, args: argparse.Namespace) -> int:
    logs(args.verbose)
    process = Scheduler(store, lease_ttl=args.lease_ttl)
    on_signals(process.stop)
    with serving_metrics(args):
        process.run()
    return 0


def load_worker(args: argparse.Namespace) -> Worker:
    """Import MODULE:OBJECT with `--db` / `--namespace` / `--listen-db` in the environment, for the
    module's own `alkstore.connect()`; flags win over the variables, which are kept
    when no flag is given. A store on another namespace or engine than the flags or
    variables ask for is refused."""
    target = args.target
    if not _TARGET.fullmatch(target):
        raise UsageError(
            f"cannot load worker {target!r}: expected MODULE:OBJECT, e.g. myapp.jobs:worker"
        )
    if args.db is not None:
        os.environ["ALKSTORE_DB"] = args.db
    if args.namespace is not None:
        os.environ["ALKSTORE_NAMESPACE"] = args.namespace
    if args.listen_db is not None:
        os.environ["ALKSTORE_LISTEN_DB"] = args.listen_db
    module_name, _, path = target.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        worker = functools.reduce(
            getattr, (path or "worker").split("."), importlib.import_module(module_name)
        )
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load worker {target!r}: {exc}") from None
    except alkstore.AlkstoreError as exc:  # e.g. the module's connect() failed
        raise LoadError(str(exc)) from None
    if not isinstance(worker, Worker):
        raise UsageError(f"cannot load worker {target!r}: it is not a relay.Worker")
    _same_store(worker.store, args)
    return worker


def _same_store(store: alkstore.Store, args: argparse.Namespace) -> None:
    wanted = os.environ.get("ALKSTORE_NAMESPACE")
    source = "--namespace" if args.namespace is not None else "$ALKSTORE_NAMESPACE="
    if wanted and store.namespace != wanted:
        raise UsageError(
            f"{source}{'' if source.endswith('=') else ' '}{wanted} but {args.target!r} "
            f"runs on namespace {store.namespace!r} (its alkstore.connect(namespace=...)); "
            "make them agree"
        )
    url = os.environ.get("ALKSTORE_DB")
    engine = None if not url else "sqlite" if url.lower().startswith("sqlite") else "postgres"
    if engine is not None and store.engine.name != engine:
        raise UsageError(
            f"the database is a {engine} URL but {args.target!r} runs on "
            f"{store.engine.name} (its alkstore.connect(url)); make them agree"
        )


def worker(args: argparse.Namespace) -> int:
    logs(args.verbose)
    process = load_worker(args)
    if args.concurrency is not None:
        process.concurrency = args.concurrency
    for name, value in _live.retention_options(args).items():
        setattr(process, name, value)  # flags win over the module's Worker(...)
    queues = args.queues.split(",") if args.queues else None
    on_signals(process.stop)
    with serving_metrics(args):
        process.run(queues=queues, once=args.once)
    return 0


PROCESSES = {"relay": relay, "scheduler": scheduler}
