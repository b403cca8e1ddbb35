"""The `alkstore` command line's arguments: every number checked by its type, every
mistake one line on stderr (exit 2), and help that shows the defaults in effect."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn
from urllib.parse import urlsplit

import alkstore
from relay.cli import _live

DEFAULT_DB = "sqlite:///alkstore.db"  # alkstore.connect()'s own default (tests/acceptance)
DEFAULT_NAMESPACE = "alkstore"


class _Help(argparse.HelpFormatter):
    """Every option's default in its help, where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default:" not in text:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `alkstore: <what is wrong> (see ... --help)`, and
    the defaults in the help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"alkstore: {message} (see `{self.prog} --help`)\n")


def count(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return value


def masked(url: str) -> str:
    """`url` with its password hidden (help text is for sharing)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        url = url.replace(f":{password}@", ":***@", 1)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)


def _default(value: str, variable: str, builtin: str) -> str:
    """Help text for a default that `$variable` overrides (% escaped for argparse)."""
    env = os.environ.get(variable)
    shown = f"{masked(env)} (from ${variable})" if env else f"{builtin}; set ${variable} to change"
    return f"{value} (default: {shown})".replace("%", "%%")


def build() -> Parser:
    parser = Parser(prog="alkstore", description=alkstore.__doc__)
    parser.add_argument("--version", action="version", version=f"alkstore {alkstore.__version__}")
    common = Parser(add_help=False)
    common.add_argument("--db", help=_default("database URL", "ALKSTORE_DB", DEFAULT_DB))
    common.add_argument(
        "--namespace",
        help=_default("schema / table prefix", "ALKSTORE_NAMESPACE", DEFAULT_NAMESPACE),
    )
    common.add_argument(
        "--listen-db",
        help=_default(
            "PostgreSQL URL that reaches the server directly, for LISTEN when --db goes "
            "through a connection pooler",
            "ALKSTORE_LISTEN_DB",
            "none",
        ),
    )
    running = Parser(add_help=False)  # what relay, scheduler and worker share
    running.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v: alkstore's DEBUG lines too (every job, every relay batch); -vv: every "
        "library's (default: INFO: starts, stops, leadership, retries, dead letters)",
    )
    running.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (0: any free port, "
        "logged); needs alkstore[metrics]",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", parents=[common], help="create or upgrade alkstore's tables")
    sql = commands.add_parser("sql", parents=[common], help="print the DDL without applying it")
    sql.add_argument(
        "--pending", action="store_true", help="only what `migrate` would run on this database"
    )
    sql.add_argument(
        "--grants", action="store_true", help="the GRANTs for the roles named below (PostgreSQL)"
    )
    for part in ("admin", "producer", "worker", "relay", "reader"):
        sql.add_argument(f"--{part}", metavar="ROLE", help=f"--grants: the {part} role")
    events = commands.add_parser("events", parents=[common], help="read or replay the event log")
    events.add_argument("action", choices=["tail", "replay"])
    events.add_argument("--after", type=count(0), default=0, help="tail: start after this position")
    events.add_argument("--follow", action="store_true", help="tail: keep waiting for events")
    events.add_argument("--batch", type=count(1), default=500, help="tail: events read per page")
    events.add_argument("--queue", help="replay: the subscription's queue")
    events.add_argument("--from", dest="from_position", type=int, help="replay: first position")
    run = commands.add_parser("relay", parents=[common, running], help="fan events out into queues")
    run.add_argument("--batch", type=count(1), default=5_000, help="events per transaction")
    run.add_argument(
        "--sink-batch", type=count(1), default=1_000, help="messages per broker sink batch"
    )
    run.add_argument("--lease-ttl", type=seconds, default=3.0, help="failover bound, seconds")
    sched = commands.add_parser(
        "scheduler", parents=[common, running], help="fire schedules (standalone)"
    )
    sched.add_argument("--lease-ttl", type=seconds, default=3.0, help="failover bound, seconds")
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
    work = commands.add_parser(
        "worker", parents=[common, running], help="run handlers: MODULE:WORKER"
    )
    work.add_argument("target", help="where the relay.Worker is, e.g. myapp.jobs:worker")
    work.add_argument("--queues", help="comma-separated subset of the handlers' queues")
    work.add_argument("--concurrency", type=count(1), help="total handlers running at once")
    work.add_argument("--once", action="store_true", help="drain the queues, then exit")
    from relay.cli import _ops  # queues, jobs, dlq (it imports this module's helpers)

    _ops.add_parsers(commands, common)
    _live.add_parsers(commands, common)  # status, workers, subscriptions; retention flags
    from relay.cli import _dashboard  # it imports this module's `port`

    _dashboard.add_parsers(commands, common)
    return parser
