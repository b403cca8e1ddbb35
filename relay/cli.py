"""The `alkstore` command line. Every command takes --db URL (or $ALKSTORE_DB)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import alkstore


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
    tail = commands.add_parser("events", parents=[common], help="read the event log")
    tail.add_argument("action", choices=["tail"])
    tail.add_argument("--after", type=int, default=0, help="start after this position")
    tail.add_argument("--follow", action="store_true", help="keep waiting for new events")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        store = alkstore.connect(args.db, namespace=args.namespace)
    except alkstore.AlkstoreError as exc:
        print(f"alkstore: {exc}", file=sys.stderr)
        return 2
    try:
        with store:
            if args.command == "migrate":
                applied = store.migrate()
                done = ", ".join(f"{v:04d}" for v in applied) or "nothing to do"
                print(f"migrated {store.namespace}: {done}")
            elif args.command == "sql":
                sys.stdout.write(store.sql(pending_only=args.pending))
            elif args.command == "events":
                _tail(store, args.after, args.follow)
    except alkstore.AlkstoreError as exc:
        print(f"alkstore: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
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


if __name__ == "__main__":
    raise SystemExit(main())
