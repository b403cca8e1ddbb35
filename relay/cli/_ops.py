"""The operating commands: `alkstore queues list|show|pause|resume|purge`, `alkstore jobs
get|list|cancel|retry` and `alkstore dlq list|show|requeue|purge` (relay/cli/_dlq.py),
on the store's public API (docs/adr/0017).

Every one takes the common --db / --namespace and --json; errors are one line and exit as
the other commands do (docs/adr/0015): 2 for a command line that cannot run (a bulk
operation without --yes when nobody can be asked), 1 for what the store refused (an
unknown job, a running job to cancel)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import datetime

import msgspec

import alkstore
from relay.cli import _dlq, _show
from relay.cli._parser import Parser, count

Handler = Callable[[alkstore.Store, argparse.Namespace], int]
BATCH = 500


def since(text: str) -> str:
    """An argparse type: an ISO 8601 time (UTC unless it says otherwise) or a duration
    ago (90s, 15m, 2h, 7d); checked here, resolved on the store's clock later."""
    if not _show.AGO.fullmatch(text):
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an ISO 8601 time (2026-12-01T10:00) or a duration ago "
                f"(90s, 15m, 2h, 7d), got {text!r}"
            ) from None
    return text


def regex(text: str) -> str:
    """An argparse type: a regular expression (searched in each dead letter's reason)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc}): {text!r}") from None
    return text


def _leaf(
    actions: argparse._SubParsersAction[Parser], name: str, help: str, common: Parser
) -> Parser:
    """An action's parser: the common flags, and --json unless they already carry it."""
    parser = actions.add_parser(name, parents=[common], help=help)
    if not any("--json" in action.option_strings for action in common._actions):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def add_parsers(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """The queues, jobs and dlq commands, each with its actions."""
    group = commands.add_parser("queues", help="list, show, pause, resume or purge queues")
    actions = group.add_subparsers(dest="action", required=True)
    _leaf(actions, "list", "every queue with its counts", common)
    _leaf(actions, "show", "one queue: counts, configuration, subscription", common).add_argument(
        "queue"
    )
    _leaf(actions, "pause", "stop claims of the queue, in every process", common).add_argument(
        "queue"
    )
    _leaf(actions, "resume", "let claims take the queue's jobs again", common).add_argument("queue")
    purge = _leaf(actions, "purge", "delete waiting jobs (or dead letters)", common)
    purge.add_argument("queue")
    purge.add_argument(
        "--state",
        choices=["ready", "scheduled", "dead"],
        help="only these (default: every waiting job: ready, scheduled, expired)",
    )
    _bulk(purge)

    group = commands.add_parser("jobs", help="get, list, cancel or retry jobs")
    actions = group.add_subparsers(dest="action", required=True)
    get = _leaf(actions, "get", "a job by id, live or dead, with its attempts", common)
    get.add_argument("id", type=count(1))
    _imports(get)
    listing = _leaf(actions, "list", "a queue's live jobs in id order", common)
    listing.add_argument("queue")
    listing.add_argument(
        "--state", choices=["ready", "scheduled", "running", "expired", "held", "parked"]
    )
    listing.add_argument("--limit", type=count(1), default=100, help="jobs shown")
    listing.add_argument("--after", type=count(0), default=0, help="start after this id")
    _imports(listing)
    cancel = _leaf(actions, "cancel", "delete a waiting job (by id, or --queue and --key)", common)
    cancel.add_argument("id", type=count(1), nargs="?")
    cancel.add_argument("--queue", help="the queue of the job named by --key")
    cancel.add_argument("--key", help="the dedupe key of the job to cancel (docs/adr/0022)")
    cancel.add_argument(
        "--force", action="store_true", help="a running job too (its handler is not stopped)"
    )
    _leaf(actions, "retry", "make a waiting job claimable now", common).add_argument(
        "id", type=count(1)
    )

    group = commands.add_parser("dlq", help="list, show, requeue or purge dead letters")
    actions = group.add_subparsers(dest="action", required=True)
    listing = _leaf(actions, "list", "a queue's dead letters in id order", common)
    listing.add_argument("queue")
    listing.add_argument("--limit", type=count(1), default=100, help="dead letters shown")
    listing.add_argument("--after", type=count(0), default=0, help="start after this id")
    _selectors(listing)
    _imports(listing)
    show = _leaf(actions, "show", "a dead letter by id, with its attempts", common)
    show.add_argument("id", type=count(1))
    _imports(show)
    for name, help in (
        ("requeue", "put dead letters back in their queue, ready now"),
        ("purge", "delete dead letters"),
    ):
        bulk = _leaf(actions, name, help, common)
        bulk.add_argument("ids", nargs="*", type=count(1), metavar="ID", help="dead letters")
        bulk.add_argument("--all", metavar="QUEUE", help="every dead letter of QUEUE (filtered)")
        _selectors(bulk)
        _bulk(bulk)


def _selectors(parser: Parser) -> None:
    parser.add_argument(
        "--since",
        type=since,
        help="died at or after: an ISO 8601 time (UTC) or 90s, 15m, 2h, 7d ago",
    )
    parser.add_argument(
        "--error", type=regex, metavar="PATTERN", help="reason matches this regular expression"
    )


def _bulk(parser: Parser) -> None:
    parser.add_argument("--yes", action="store_true", help="do it without asking")
    parser.add_argument("--batch", type=count(1), default=BATCH, help="rows per transaction")


def _imports(parser: Parser) -> None:
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first, to decode payloads with its event classes (repeatable)",
    )


# -- queues --------------------------------------------------------------------------------


def queues(store: alkstore.Store, args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        found = store.queues()
        if args.json:
            _show.print_json([msgspec.to_builtins(info) for info in found])
        else:
            _show.table(
                ["QUEUE", "READY", "SCHEDULED", "RUNNING", "DEAD", "OLDEST READY", "PAUSED"],
                [_row(info) for info in found],
            )
        return 0
    if action == "show":
        return _queue_show(store, args)
    queue = store.queue(args.queue)
    if action in ("pause", "resume"):
        queue.pause() if action == "pause" else queue.resume()
        if args.json:
            _show.print_json({"queue": queue.name, "paused": action == "pause"})
        else:
            print(f"{'paused' if action == 'pause' else 'resumed'} {queue.name}")
        return 0
    return _purge(store, queue, args)


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _row(info: alkstore.QueueInfo) -> list[object]:
    return [
        info.name,
        info.ready,
        info.scheduled,
        info.running,
        info.dead,
        _age(info.oldest_ready_age),
        "yes" if info.paused else "no",
    ]


def _queue_show(store: alkstore.Store, args: argparse.Namespace) -> int:
    info = next((i for i in store.queues() if i.name == args.queue), None)
    if info is None:
        raise alkstore.QueueError(
            f"no queue {args.queue!r}: nothing declares it, subscribes to it or holds its jobs"
        )
    config = store.queue(info.name).config(refresh=True)
    events = next((s.events for s in store.subscriptions() if s.queue == info.name), None)
    if args.json:
        shown = msgspec.to_builtins(info)
        shown.update(config=msgspec.to_builtins(config), subscription=events)
        _show.print_json(shown)
        return 0
    retention = "kept" if config.dead_retention is None else f"{config.dead_retention:g}s"
    print(f"queue: {info.name}{'  (paused)' if info.paused else ''}")
    print(f"ready: {info.ready}, scheduled: {info.scheduled}, running: {info.running}, ", end="")
    print(f"dead: {info.dead}; oldest ready: {_age(info.oldest_ready_age)}")
    print(f"max_attempts: {config.max_attempts}, visibility: {config.visibility:g}s")
    print(f"backoff: {config.backoff!r}")
    print(f"dead letters: {retention}")
    print(f"subscription: {', '.join(events) if events is not None else '-'}")
    return 0


def _purge(store: alkstore.Store, queue: alkstore.Queue, args: argparse.Namespace) -> int:
    info, state = queue.info(), args.state
    total = {
        None: info.ready + info.scheduled,
        "ready": info.ready,
        "scheduled": info.scheduled,
        "dead": info.dead,
    }[state]
    what = "dead letter" if state == "dead" else f"{state or 'waiting'} job"
    result: dict[str, object] = {"queue": queue.name, "state": state, "purged": 0}
    if not total:
        return _done(args, result, f"{queue.name}: no {what}s to purge")
    if not _show.confirm(args, f"purge {_show.plural(total, what)} of queue {queue.name!r}"):
        return 1
    progress = _show.Progress(total, "purged")
    try:
        result["purged"] = purged = queue.purge(state, batch=args.batch, progress=progress)
    except KeyboardInterrupt:
        return progress.interrupted(f"{what}s")
    progress.end()
    return _done(args, result, f"purged {_show.plural(purged, what)} of {queue.name}")


def _done(args: argparse.Namespace, result: dict[str, object], text: str) -> int:
    if args.json:
        _show.print_json(result)
    else:
        print(text)
    return 0


# -- jobs ----------------------------------------------------------------------------------


def jobs(store: alkstore.Store, args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        _show.import_events(args.imports)
        found = store.queue(args.queue).jobs(args.state, limit=args.limit, after=args.after)
        if args.json:
            _show.print_json([_show.job_json(job) for job in found])
        else:
            _show.table(
                ["ID", "STATE", "PRIORITY", "ATTEMPTS", "RUN AT / LEASE END", "TYPE", "LAST ERROR"],
                [
                    [
                        job.id,
                        job.state,
                        job.priority,
                        f"{job.attempts}/{job.max_attempts}",
                        _show.iso(job.visible_at),
                        job.type or "-",
                        job.last_error or "-",
                    ]
                    for job in found
                ],
            )
        return 0
    if action == "cancel" and (args.id is None or args.key is not None):
        if args.id is not None or args.key is None or args.queue is None:
            raise alkstore.InvalidArgument("jobs cancel takes an id, or --queue and --key")
        queue = store.queue(args.queue)
        queue.cancel(dedupe_key=args.key, force=args.force)
        result = {"queue": queue.name, "dedupe_key": args.key, "cancelled": True}
        return _done(args, result, f"cancelled the job with key {args.key!r} of {queue.name}")
    if action == "get":
        _show.import_events(args.imports)
        _show_job(args, store.job(args.id), args.id)
        return 0
    job = store.job(args.id)
    if job is None or isinstance(job, alkstore.DeadLetter):
        raise alkstore.JobNotFound(args.id, dead=job is not None)
    queue = store.queue(job.queue)
    if action == "cancel":
        queue.cancel(args.id, force=args.force)
        result = {"id": args.id, "queue": queue.name, "cancelled": True}
        return _done(args, result, f"cancelled job {args.id} of {queue.name}")
    queue.retry(args.id)
    result = {"id": args.id, "queue": queue.name, "state": "ready"}
    return _done(args, result, f"job {args.id} of {queue.name} is ready")


def _show_job(args: argparse.Namespace, job: _show.Shown | None, job_id: int) -> None:
    if job is None:
        raise alkstore.JobNotFound(job_id)
    if args.json:
        _show.print_json(_show.job_json(job))
    else:
        _show.print_job(job)


COMMANDS: dict[str, Handler] = {"queues": queues, "jobs": jobs, "dlq": _dlq.dlq}
