"""What runs and what it holds: `status`, `workers`, `subscriptions list|add|remove|resume`
(`add --sink URL`: a broker sink, `_sinks`), and
the retention flags of `relay` and `worker` (docs/adr/0018-live-workers-status-retention.md).

The store gathers the data (`store.status()`, `store.workers()`, ...); this module
prints it, as text or, with `--json`, as the JSON of the store's own structs (their
field names are the keys; README "status --json")."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

import alkstore
from relay.cli import _sinks
from relay.cli._commands import UsageError

_json = msgspec.json.Encoder()
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)?")
_UNIT = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, None: 1}


def duration(text: str) -> float:
    """An argparse type: a retention, `0` (keep forever), seconds, or `90s` `30m` `36h`
    `14d`."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"must be a duration like 14d, 36h, 30m, 90s or seconds (0: keep forever), got {text!r}"
        )
    return float(match[1]) * _UNIT[match[2]]


def span(seconds: float) -> str:
    """14d, 36h, 90m, 45s, 1.5s: a duration as a person reads it."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s" if seconds == int(seconds) else f"{seconds:.1f}s"


def kept(seconds: float | None) -> str:
    return "kept forever" if seconds is None else f"kept {span(seconds)}"


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """The commands of this module, and the retention flags of `relay` and `worker`
    (which must exist already)."""
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON (stable keys)")
    commands.add_parser(
        "status",
        parents=[common, as_json],
        help="log head, lag, queues, schedules, leaders, workers, retention",
    )
    commands.add_parser(
        "workers", parents=[common, as_json], help="worker processes: live, and dead (1 h)"
    )
    subs = commands.add_parser(
        "subscriptions",
        parents=[common, as_json],
        help="list, add or remove subscriptions (to a queue or, --sink URL, a broker); "
        "resume a parked broker sink",
    )
    subs.add_argument("action", choices=["list", "add", "remove", "resume"])
    subs.add_argument(
        "queue",
        nargs="?",
        metavar="NAME",
        help="add, remove: the subscribed queue, or the sink subscription's name",
    )
    subs.add_argument(
        "events", nargs="*", metavar="PATTERN", help='add: event type patterns, e.g. "order.*"'
    )
    subs.add_argument(
        "--start",
        default="now",
        help='add: "now" (new events only), "beginning" (the retained log) or a position',
    )
    keyed = subs.add_mutually_exclusive_group()  # what a newer event with a live key does
    keyed.add_argument("--dedupe-by-key", action="store_true", help="add: makes no job")
    keyed.add_argument(
        "--replace-by-key", action="store_true", help="add: replaces the waiting job"
    )
    keyed.add_argument(
        "--debounce-by-key",
        type=float,
        metavar="SECONDS",
        help="add: replaces the waiting job, due SECONDS later (docs/adr/0022)",
    )
    _sinks.add_flags(subs)
    policy = alkstore.Retention()
    assert policy.log is not None and policy.dead_letters is not None
    for name in ("relay", "worker"):
        parser = commands.choices[name]
        parser.add_argument(
            "--retention",
            type=duration,
            help="keep the log's events this long after every subscription relayed them "
            f"(e.g. 7d; 0: forever; default: {span(policy.log)})",
        )
        parser.add_argument(
            "--dead-retention",
            type=duration,
            help="keep dead letters this long unless their queue has its own "
            f"(e.g. 14d; 0: forever; default: {span(policy.dead_letters)})",
        )


def retention_options(args: argparse.Namespace) -> dict[str, float]:
    """The retention flags given (0: forever), as Relay / Worker keyword arguments."""
    given = {"retention": args.retention, "dead_retention": args.dead_retention}
    return {name: value for name, value in given.items() if value is not None}


def _print_json(value: object) -> None:
    sys.stdout.write(_json.encode(value).decode() + "\n")


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat().replace("+00:00", "Z")


def status(store: alkstore.Store, args: argparse.Namespace) -> int:
    state = store.status()
    if args.json:
        _print_json(state)
        return 0
    say = print
    say(f"log head: {state.head}")
    retained = state.oldest_retained
    if state.head and (retained is None or retained > 1):  # retention pruned the start
        last_gone = state.head if retained is None else retained - 1
        say(f"oldest retained position: {retained or 'none'} (1-{last_gone} pruned)")
    if state.unsequenced:
        say(
            f"unsequenced: {state.unsequenced} committed "
            f"{'event' if state.unsequenced == 1 else 'events'} had no position yet "
            "(numbered now)"
        )
    queues = {q.name: q for q in state.queues}
    say("subscriptions:" if state.subscriptions else "subscriptions: none")
    for lag in state.subscriptions:
        age = "caught up" if lag.seconds is None else f"{lag.seconds:.1f}s behind"
        if lag.sink is not None:  # a broker sink (docs/adr/0026)
            parked = "" if lag.parked is None else f"; PARKED: {lag.parked}"
            say(
                f"  {lag.queue} -> {lag.sink}: checkpoint {lag.checkpoint}, "
                f"{lag.events} events / {age}{parked}"
            )
            continue
        q = queues[lag.queue]
        oldest = "" if q.oldest_ready_age is None else f", oldest {q.oldest_ready_age:.1f}s"
        say(
            f"  {lag.queue}: checkpoint {lag.checkpoint}, {lag.events} events / {age}; "
            f"jobs ready {q.ready}, scheduled {q.scheduled}, active {q.running}, "
            f"dead {q.dead}{oldest}"
        )
        if lag.gap is not None:
            first, last = lag.gap
            say(f"    never had positions {first}-{last}: pruned by retention before it asked")
    say("queues:" if state.queues else "queues: none")
    for q in state.queues:
        oldest = "" if q.oldest_ready_age is None else f", oldest ready {q.oldest_ready_age:.1f}s"
        notes = "; paused" if q.paused else ""
        if q.dead_retention is not None:
            notes += f"; dead letters {kept(q.dead_retention)}"
        say(
            f"  {q.name}: ready {q.ready}, scheduled {q.scheduled}, running {q.running}, "
            f"dead {q.dead}{oldest}{notes}"
        )
    say("schedules:" if state.schedules else "schedules: none")
    for s in state.schedules:
        spec = f"cron {s.cron} ({s.tz})" if s.cron else f"every {span(s.every or 0)}"
        when = "paused" if s.paused else f"next {_when(s.next_fire)}"
        say(f"  {s.name}: {spec}, {s.event_type}, {when}")
    say("leaders:")
    for leader in state.leaders:
        say(f"  {leader.role}: {_leader(leader)}")
    _workers_summary(state.workers, say)
    if state.retention is not None:
        r = state.retention
        source = (
            f"by {r.swept_by}'s last sweep" if r.source == "sweep" else "defaults, no sweep yet"
        )
        say(
            f"retention: dead letters {kept(r.dead_letters)} unless their queue says; events "
            f"{kept(r.log)} once every subscription relayed them ({source})"
        )
    for holdup in state.holdups:
        say(
            f"open writing transaction: pid {holdup.pid}, {holdup.age:.1f}s old, {holdup.state}: "
            f"{holdup.query!r} (its events appear when it commits)"
        )
    if state.hidden_holdups:
        say(
            f"open writing transactions of other roles: {state.hidden_holdups}, not shown "
            "(this role lacks pg_read_all_stats)"
        )
    holding = state.oldest_appender
    if holding is not None:
        say(
            f"oldest transaction holding unsequenced events: pid {holding.pid}, "
            f"{holding.age:.1f}s old, {holding.state}: {holding.query!r} "
            "(its events get positions when it commits)"
        )
    return 0


def _leader(leader: Any) -> str:
    if leader.role == "sweeper":
        if leader.holder is None:
            return "none yet (relays and workers sweep, one at a time)"
        idle = "" if leader.active else " (no sweep since: is any relay or worker running?)"
        return f"{leader.holder}, last sweep {leader.ago:.1f}s ago{idle}"
    if leader.active:
        return f"{leader.holder} (lease {leader.expires_in:.1f}s left)"
    last = "" if leader.holder is None else f" (last: {leader.holder}, lease expired)"
    if leader.role == "scheduler":
        return f"none{last}; the relay fires schedules unless run without them"
    return f"none{last}"


def _workers_summary(workers: list[alkstore.WorkerInfo], say: Callable[[str], None]) -> None:
    if not workers:
        say("workers: none")
        return
    live = sum(w.alive for w in workers)
    say(f"workers: {live} live, {len(workers) - live} dead")
    for w in workers:
        state = "" if w.alive else "DEAD, "
        say(
            f"  {w.host} pid {w.pid}: {state}queues {','.join(w.queues)}, concurrency "
            f"{w.concurrency}, started {_when(w.started_at)}, last seen {w.seen_ago:.1f}s ago"
        )


def workers(store: alkstore.Store, args: argparse.Namespace) -> int:
    found = store.workers()
    if args.json:
        _print_json(found)
        return 0
    if not found:
        print("workers: none")
        return 0
    print("HOST\tPID\tQUEUES\tCONCURRENCY\tSTARTED\tLAST SEEN\tSTATE")
    for w in found:
        print(
            f"{w.host}\t{w.pid}\t{','.join(w.queues)}\t{w.concurrency}\t{_when(w.started_at)}\t"
            f"{w.seen_ago:.1f}s ago\t{'live' if w.alive else 'dead'}"
        )
    return 0


def _keyed(sub: alkstore.Subscription) -> str:
    """How its jobs take their event's key, as `subscriptions add` takes it ('' for none)."""
    if sub.debounce_by_key is not None:
        return f"\t--debounce-by-key {sub.debounce_by_key:g}"
    if sub.replace_by_key:
        return "\t--replace-by-key"
    return "\t--dedupe-by-key" if sub.dedupe_by_key else ""


def subscriptions(store: alkstore.Store, args: argparse.Namespace) -> int:
    action, queue = args.action, args.queue
    if action != "list" and not queue:
        raise UsageError(f"subscriptions {action} needs a QUEUE (or a sink's NAME)")
    if action != "add" and (args.sink is not None or _sinks.options(args)):
        raise UsageError("--sink and the sink options go with subscriptions add")
    if action == "list":
        if args.queue or args.events:
            raise UsageError("subscriptions list takes no QUEUE or patterns")
        found = store.subscriptions()
        sinks = store.sink_subscriptions()  # broker sinks (docs/adr/0026)
        if args.json:
            _print_json(found + sinks if sinks else found)
        elif not found and not sinks:
            print("subscriptions: none")
        for sub in [] if args.json else found:
            print(f"{sub.queue}\t{','.join(sub.events)}\tcheckpoint {sub.checkpoint}{_keyed(sub)}")
        for sink in [] if args.json else sinks:
            parked = "" if sink.parked is None else f"\tPARKED: {sink.parked}"
            options = _sinks.describe(sink).rstrip()
            print(
                f"{sink.name}\t{','.join(sink.events)}\tcheckpoint {sink.checkpoint}"
                f"\t-> {sink.sink}{parked}{chr(9) + options if options else ''}"
            )
    elif action == "add":
        if not args.events:
            raise UsageError('subscriptions add needs event patterns, e.g. "order.*"')
        start: Any = args.start
        if start not in ("now", "beginning"):
            try:
                start = int(start)
            except ValueError:
                raise UsageError(
                    f'--start must be "now", "beginning" or a position, got {start!r}'
                ) from None
        if args.sink is not None:
            if args.dedupe_by_key or args.replace_by_key or args.debounce_by_key is not None:
                raise UsageError("--dedupe/--replace/--debounce-by-key are a queue's, not a sink's")
            _sinks.add(store, args, start)
            return 0
        _sinks.options(args)  # a sink option without --sink: refused
        existed = any(s.queue == queue for s in store.subscriptions())
        sub = store.subscribe(
            queue,
            args.events,
            start=start,
            dedupe_by_key=args.dedupe_by_key,
            replace_by_key=args.replace_by_key,
            debounce_by_key=args.debounce_by_key,
        )
        if args.json:
            _print_json(sub)
        elif existed:
            print(f"updated {queue}: {','.join(sub.events)} (checkpoint kept at {sub.checkpoint})")
        else:
            print(f"subscribed {queue} to {','.join(sub.events)} after position {sub.checkpoint}")
    elif action == "resume":
        if args.events:
            raise UsageError("subscriptions resume takes one NAME")
        if not store.resume_sink(queue):
            raise alkstore.InvalidArgument(f"no broker sink subscription {queue!r}")
        print(f"resumed {queue}: the relay publishes from its checkpoint on")
    else:
        if args.events:
            raise UsageError("subscriptions remove takes one NAME")
        is_sink = any(s.name == queue for s in store.sink_subscriptions())
        if not store.unsubscribe(queue):
            raise alkstore.InvalidArgument(f"no subscription for queue {queue!r}")
        if is_sink:
            print(f"removed the sink subscription {queue} (what the broker holds stays)")
        else:
            print(f"removed the subscription of {queue} (its jobs stay)")
    return 0


COMMANDS = {"status": status, "workers": workers, "subscriptions": subscriptions}
