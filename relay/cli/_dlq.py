"""`alkstore dlq list Q | show ID | requeue (ID... | --all Q [--since T] [--error P]) |
purge (the same)`: dead letters for operators (docs/adr/0017; parsers in _ops.py).

By ids, the named dead letters are requeued or purged at once: an id that is not a dead
letter (any more) is named on stderr and the exit is 1, after the others were done. With
--all, the selection is counted, said, confirmed (unless --yes) and done in transactions
of --batch, with progress from a thousand on; interrupted, each batch is done or not, and
the same command again does the rest."""

from __future__ import annotations

import argparse
import sys

import alkstore
from relay.cli import _show
from relay.cli._commands import UsageError


def dlq(store: alkstore.Store, args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        return _list(store, args)
    if action == "show":
        _show.import_events(args.imports)
        found = store.job(args.id)
        if found is None:
            raise alkstore.JobNotFound(args.id)
        if not isinstance(found, alkstore.DeadLetter):
            raise alkstore.QueueError(
                f"job {args.id} is not a dead letter: it is {found.state} in queue "
                f"{found.queue!r} (alkstore jobs get {args.id})"
            )
        if args.json:
            _show.print_json(_show.job_json(found))
        else:
            _show.print_job(found)
        return 0
    if args.ids and args.all is not None:
        raise UsageError(f"dlq {action}: give dead-letter ids or --all QUEUE, not both")
    if args.ids:
        if args.since is not None or args.error is not None:
            raise UsageError(f"dlq {action}: --since and --error select with --all QUEUE")
        return _by_ids(store, args)
    if args.all is None:
        raise UsageError(f"dlq {action} needs dead-letter ids or --all QUEUE")
    return _bulk(store, args)


def _list(store: alkstore.Store, args: argparse.Namespace) -> int:
    _show.import_events(args.imports)
    found = store.queue(args.queue).dead_letters(
        args.limit, args.after, since=_show.since_value(store, args.since), error=args.error
    )
    if args.json:
        _show.print_json([_show.job_json(dead) for dead in found])
        return 0
    _show.table(
        ["ID", "DIED AT", "ATTEMPTS", "TYPE", "REASON"],
        [
            [d.id, _show.iso(d.died_at), f"{d.attempts}/{d.max_attempts}", d.type or "-", d.reason]
            for d in found
        ],
    )
    return 0


def _by_ids(store: alkstore.Store, args: argparse.Namespace) -> int:
    """The named dead letters, queue by queue; those that are not dead letters are named."""
    queues: dict[str, list[int]] = {}
    missing: list[int] = []
    for job_id in dict.fromkeys(args.ids):
        found = store.job(job_id)
        if isinstance(found, alkstore.DeadLetter):
            queues.setdefault(found.queue, []).append(job_id)
        else:
            missing.append(job_id)
    done = 0
    for name, ids in queues.items():
        queue = store.queue(name)
        if args.action == "requeue":
            done += queue.requeue(ids, batch=args.batch)
        else:
            done += queue.purge_dead(ids, batch=args.batch)
    verb = "requeued" if args.action == "requeue" else "purged"
    kept = sum(map(len, queues.values())) - done
    result = {verb: done, "missing": missing}
    if args.action == "requeue":
        result["kept"] = kept
    if args.json:
        _show.print_json(result)
    else:
        print(f"{verb} {_show.plural(done, 'dead letter')}")
    if kept and args.action == "requeue":
        print(
            f"alkstore: {_show.plural(kept, 'dead letter')} stayed dead: a live job holds "
            "the dedupe key",
            file=sys.stderr,
        )
    if missing:
        shown = ", ".join(map(str, missing))
        print(f"alkstore: not dead letters (any more): {shown}", file=sys.stderr)
        return 1
    return 0


def _bulk(store: alkstore.Store, args: argparse.Namespace) -> int:
    queue = store.queue(args.all)
    since = _show.since_value(store, args.since)
    total = queue.count_dead(since=since, error=args.error)
    verb = "requeued" if args.action == "requeue" else "purged"
    result: dict[str, object] = {"queue": queue.name, verb: 0}
    selection = f"of queue {queue.name!r}"
    if since is not None:
        selection += f" that died since {_show.iso(since)}"
    if args.error is not None:
        selection += f"{' and' if since else ' that'} match {args.error!r}"
    if not total:
        return _said(args, result, f"no dead letters {selection}")
    plan = f"{args.action} {_show.plural(total, 'dead letter')} {selection}"
    if not _show.confirm(args, plan):
        return 1
    progress = _show.Progress(total, verb)
    try:
        if args.action == "requeue":
            done = queue.requeue(since=since, error=args.error, batch=args.batch, progress=progress)
        else:
            done = queue.purge_dead(
                "all", since=since, error=args.error, batch=args.batch, progress=progress
            )
    except KeyboardInterrupt:
        return progress.interrupted("dead letters")
    progress.end()
    result[verb] = done
    text = f"{verb} {_show.plural(done, 'dead letter')} of {queue.name}"
    if args.action == "requeue" and done < total:
        text += f" ({total - done:,} stayed dead: a live job holds the dedupe key)"
    return _said(args, result, text)


def _said(args: argparse.Namespace, result: dict[str, object], text: str) -> int:
    if args.json:
        _show.print_json(result)
    else:
        print(text)
    return 0
