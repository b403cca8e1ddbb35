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
from relay.cli import _commands, _live, _parser, _processes

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


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "worker":
            return _processes.worker(args)
        store = alkstore.connect(args.db, namespace=args.namespace)
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
                or _live.COMMANDS.get(args.command)
                or _processes.PROCESSES[args.command]
            )
            return command(store, args)
    except _commands.UsageError as exc:
        return _say(exc, 2)
    except alkstore.AlkstoreError as exc:
        return _say(exc, 1)


__all__ = ["main"]
