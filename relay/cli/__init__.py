"""The `alkstore` command line. Every command takes --db URL and --namespace (or
$ALKSTORE_DB and $ALKSTORE_NAMESPACE; a flag wins over its variable).

A mistake is one line on stderr and a non-zero exit, never a traceback: 2 for a
command line or database that cannot be used (bad flags, unreachable database), 1 for
an operation the store refused (not migrated, an unknown queue, ...). A closed pipe
(`alkstore events tail | head`) ends the command quietly with 141, as Unix tools do."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import alkstore
from relay.cli import _commands, _dashboard, _live, _ops, _parser, _processes

EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser.build().parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # stdout's reader went away: nothing more to say, and nothing to flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except KeyboardInterrupt:
        return 130


def _say(error: BaseException, code: int) -> int:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    print(f"alkstore: {text}", file=sys.stderr)
    return code


def listen_url(args: argparse.Namespace) -> str | None:
    """--listen-db, else $ALKSTORE_LISTEN_DB unless the database is SQLite's."""
    if args.listen_db:
        return str(args.listen_db)
    env = os.environ.get("ALKSTORE_LISTEN_DB")
    db = args.db or os.environ.get("ALKSTORE_DB") or _parser.DEFAULT_DB
    return env if env and not db.lower().startswith("sqlite") else None


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "worker":
            return _processes.worker(args)
        store = alkstore.connect(args.db, namespace=args.namespace, listen_url=listen_url(args))
    except (_commands.UsageError, _processes.LoadError) as exc:
        return _say(exc, 2)
    except alkstore.AlkstoreError as exc:  # also what a worker's run() raises
        return _say(exc, 2 if args.command != "worker" else 1)
    try:
        with store:
            if args.command not in ("migrate", "sql"):
                store.check()  # every command: one line if the tables are not there
            command = (
                _commands.COMMANDS.get(args.command)
                or _ops.COMMANDS.get(args.command)
                or _live.COMMANDS.get(args.command)
                or _dashboard.COMMANDS.get(args.command)
                or _processes.PROCESSES[args.command]
            )
            return command(store, args)
    except _commands.UsageError as exc:
        return _say(exc, 2)
    except alkstore.AlkstoreError as exc:
        return _say(exc, 1)


__all__ = ["main"]
