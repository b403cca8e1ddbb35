"""The commands that read or change the store and end: migrate, sql, events, schedules
(status, workers and subscriptions are `_live`'s). Each gets an open, checked store and
its parsed arguments; it prints to stdout and returns the exit code (errors are raised
and printed by `main`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import msgspec

import alkstore


class UsageError(Exception):
    """A command line that cannot run as given (exit 2, one line)."""


def events(n: int) -> str:
    return f"{n} event" if n == 1 else f"{n} events"


def migrate(store: alkstore.Store, args: argparse.Namespace) -> int:
    applied = store.migrate()
    done = ", ".join(f"{v:04d}" for v in applied) or "nothing to do"
    print(f"migrated {store.namespace}: {done}")
    return 0


def sql(store: alkstore.Store, args: argparse.Namespace) -> int:
    parts = ("admin", "producer", "worker", "relay", "reader")
    roles = {part: getattr(args, part) for part in parts if getattr(args, part)}
    if args.grants:
        if args.pending:
            raise UsageError("sql --grants and --pending do not go together")
        if not roles:
            options = ", ".join(f"--{part} ROLE" for part in parts)
            raise UsageError(f"sql --grants needs a role: {options}")
        sys.stdout.write(store.grants(**roles))
        return 0
    if roles:
        raise UsageError(f"--{next(iter(roles))} goes with sql --grants")
    ddl = store.sql(pending_only=args.pending)
    if ddl:
        sys.stdout.write(ddl)
    else:  # a comment: piped into psql or sqlite3 it does nothing
        print(f"-- namespace {store.namespace} is up to date: nothing to migrate")
    return 0


def event_log(store: alkstore.Store, args: argparse.Namespace) -> int:
    if args.action == "tail":
        tail(store, args.after, args.batch, args.follow)
    elif args.queue is None or args.from_position is None:
        raise UsageError("events replay needs --queue and --from")
    else:
        print(replayed(store.replay(args.queue, args.from_position)))
    return 0


def tail(store: alkstore.Store, after: int, batch: int, follow: bool) -> None:
    """Print the log from `after` on, read `batch` events at a time (bounded memory);
    following, every line is flushed as it comes."""
    write = sys.stdout.write
    for entry in store.log.tail(after, batch=batch, follow=follow):
        headers = f" {entry.headers}" if entry.headers else ""
        raw = entry.raw if isinstance(entry.raw, str) else entry.raw.decode()
        write(
            f"{entry.position}\t{entry.appended_at.isoformat()}\t{entry.type}\t"
            f"{entry.key or '-'}{headers}\t{raw}\n"
        )
        if follow:
            sys.stdout.flush()


def replayed(r: alkstore.Replay) -> str:
    """What a replay did, in one line."""
    if r.checkpoint > r.previous:
        return (
            f"{r.queue}: checkpoint moved forward from {r.previous} to {r.checkpoint}: "
            f"{events(r.skipped)} not relayed yet will not be delivered"
        )
    if r.checkpoint == r.previous:
        return f"{r.queue}: checkpoint stays at {r.checkpoint}: nothing to deliver again"
    first, last = r.checkpoint + 1, r.previous
    span = f"position {first}" if first == last else f"positions {first}-{last}"
    pruned = last - r.checkpoint - r.redelivered
    if pruned and not r.redelivered:
        span += ", all pruned by retention"
    elif r.gap is not None:
        first_gone, last_gone = r.gap
        gone = str(first_gone) if first_gone == last_gone else f"{first_gone}-{last_gone}"
        span += f"; {gone} pruned by retention"
    elif pruned:
        span += f", {pruned} pruned by retention"
    return f"{r.queue}: {events(r.redelivered)} will be delivered again ({span})"


def schedules(store: alkstore.Store, args: argparse.Namespace) -> int:
    action, name = args.action, args.name
    if action != "list" and not name:
        raise UsageError(f"schedules {action} needs a NAME")
    if action == "add":
        store.schedules.add(
            name,
            event=_event(args.event, args.data),
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


def _event(spec: str | None, data: str) -> alkstore.Event:
    if not spec:
        raise UsageError("schedules add needs --event module:Class")
    module_name, _, class_name = spec.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
        event: alkstore.Event = msgspec.json.decode(data, type=cls)
    except (ImportError, AttributeError, ValueError, TypeError, msgspec.DecodeError) as exc:
        raise UsageError(f"cannot build the event {spec!r}: {exc}") from None
    return event


COMMANDS = {
    "migrate": migrate,
    "sql": sql,
    "events": event_log,
    "schedules": schedules,
}
