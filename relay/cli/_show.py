"""How the operating commands (queues, jobs, dlq) show what they read, and the parts
every bulk operation shares: its confirmation and its progress (docs/adr/0017).

`--json` prints one JSON document on stdout (an object, or an array for a list);
everything said to the operator around it (plans, prompts, progress) goes to stderr.
A payload is shown decoded when its event class is importable (`--import MODULE`),
else as the stored JSON ("payload_view": "raw"); a plain payload is JSON anyway."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

import alkstore
from relay.cli._commands import UsageError

Shown = alkstore.JobInfo | alkstore.DeadLetter
AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_value(store: alkstore.Store, text: str | None) -> datetime | None:
    if text is None:
        return None
    ago = AGO.fullmatch(text)
    if ago:
        now = datetime.fromtimestamp(store.now(), UTC)
        return now - timedelta(seconds=float(ago[1]) * _UNIT[ago[2]])
    when = datetime.fromisoformat(text)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="milliseconds")


def import_events(modules: Sequence[str] | None) -> None:
    """Import the modules that define the application's event classes (--import)."""
    if not modules:
        return
    sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the module's own error, in one line
            raise UsageError(f"cannot import {name!r}: {exc}") from None


def payload(job: Shown) -> tuple[Any, str, str | None]:
    """(the payload as JSON builtins, its view: decoded / raw / plain, why raw)."""
    if job.type is None:
        return job.raw_payload, "plain", None
    try:
        return msgspec.to_builtins(job.payload), "decoded", None
    except alkstore.EventError as exc:
        return job.raw_payload, "raw", str(exc)


def job_json(job: Shown) -> dict[str, Any]:
    value, view, why = payload(job)
    found: dict[str, Any] = {
        "id": job.id,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "enqueued_at": iso(job.enqueued_at),
    }
    if isinstance(job, alkstore.JobInfo):
        found["visible_at"] = iso(job.visible_at)
        found["expires_at"] = iso(job.expires_at)
        found["dedupe_key"] = job.dedupe_key
        found["progress"] = job.progress
    else:
        found["died_at"] = iso(job.died_at)
        found["reason"] = job.reason
    found.update(
        type=job.type,
        key=job.key,
        position=job.position,
        headers=job.headers,
        last_error=job.last_error,
        history=[{"attempt": a.attempt, "error": a.error, "at": iso(a.time)} for a in job.history],
        payload=value,
        payload_view=view,
    )
    if why is not None:
        found["payload_error"] = why
    return found


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_job(job: Shown) -> None:
    """A job (or dead letter) for people: its fields, its history, its payload."""
    found = job_json(job)
    for name in ("id", "queue", "state", "priority", "type", "key", "position", "dedupe_key"):
        if found.get(name) is not None:
            print(f"{name}: {found[name]}")
    print(f"attempts: {job.attempts} of {job.max_attempts}")
    for name in ("enqueued_at", "visible_at", "expires_at", "died_at", "reason"):
        if found.get(name) is not None:
            label = "run at / lease end" if name == "visible_at" else name
            print(f"{label}: {found[name]}")
    if job.headers:
        print(f"headers: {json.dumps(job.headers, ensure_ascii=False)}")
    if found.get("progress") is not None:
        print(f"progress: {json.dumps(found['progress'], ensure_ascii=False)}")
    for attempt in job.history:
        print(f"attempt {attempt.attempt} at {iso(attempt.time)}: {attempt.error}")
    if found["payload_view"] == "decoded":
        print(f"payload: {job.payload!r}")
    else:
        note = "" if found["payload_view"] == "plain" else f"  (raw: {found['payload_error']})"
        print(f"payload: {json.dumps(found['payload'], ensure_ascii=False)}{note}")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Columns aligned to their widest cell; the last column as it is."""
    lines = [[str(cell) for cell in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]).rstrip())


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def confirm(args: argparse.Namespace, plan: str) -> bool:
    """Say what a bulk operation will do (stderr) and ask, unless --yes. A stdin that is
    not a terminal cannot answer: refused (exit 2) rather than guessed."""
    if not args.yes and not sys.stdin.isatty():
        raise UsageError(f"{plan}: refused without --yes (stdin is not a terminal to ask)")
    print(f"alkstore: {plan}", file=sys.stderr)
    if args.yes:
        return True
    sys.stderr.write("Go ahead? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return True
    print("alkstore: nothing done", file=sys.stderr)
    return False


class Progress:
    """`done` out of `total` on stderr, from a thousand on: redrawn in place on a
    terminal, a line every tenth otherwise (a log stays short)."""

    MIN = 1_000

    def __init__(self, total: int, verb: str) -> None:
        self.total, self.verb = total, verb
        self.done = 0
        self._shown = 0
        self._live = total >= self.MIN
        self._tty = sys.stderr.isatty()

    def __call__(self, done: int) -> None:
        self.done = done
        if not self._live:
            return
        share = min(100, done * 100 // max(1, self.total))
        line = f"{self.verb} {done:,} of {self.total:,} ({share}%)"
        if self._tty:
            sys.stderr.write(f"\r{line}")
            sys.stderr.flush()
        elif share // 10 > self._shown // 10 or done >= self.total:
            self._shown = share
            print(line, file=sys.stderr)

    def end(self) -> None:
        if self._live and self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def interrupted(self, what: str) -> int:
        """Exit 130 after Ctrl-C, saying what is done: each batch committed or not at all,
        so running the same command again finishes the work."""
        self.end()
        print(
            f"alkstore: interrupted after {self.done:,} of {self.total:,} {what}: each "
            "batch is done or untouched; run the same command again to do the rest",
            file=sys.stderr,
        )
        return 130
