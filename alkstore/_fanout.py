"""Replace and debounce on the relay's fan-out (docs/adr/0022, addendum 2026-12-01).

A subscription made with `replace_by_key=True` gives each job its event's key as dedupe
key, as `dedupe_by_key=True` does, but a newer event with the key *replaces* the job
that waits with it instead of being dropped: the job keeps its id and takes the newest
event (payload, headers, type, position), with its attempts and history starting over.
`debounce_by_key=seconds` does the same and makes the job due that long after the
newest event's relay, so a burst of events with one key runs once, when the key has been
quiet for the window. A job a worker holds keeps running; the newer event's job waits
beside it (graphile-worker's job_key_mode=replace, DBOS's debouncer; `enqueue(...,
on_duplicate="replace")` is the same rule for direct jobs, _effects.py).

Within one relay batch only the newest event of each (queue, key) makes or replaces a
job: what replacing them one by one, in log order, would leave. The relay's statement for
the other subscriptions (`relay_insert`) is not touched: `relay_bounds` names the
replacing subscriptions apart, and only a batch that has some runs these statements
(each engine's `sql/fanout.sql`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from alkstore import _checks, _engine, _errors

REPLACE_TRIES = 3  # runs of release + replace when a direct enqueue races the batch (PostgreSQL)
MAX_WINDOW_S = 366 * 86_400  # a longer debounce window is a mistake (and far ones overflow)

_names = msgspec.json.Decoder(list[str]).decode
_encode = msgspec.json.Encoder().encode


def replace_ms(dedupe_by_key: object, replace_by_key: object, debounce: object) -> int | None:
    """A subscription's `replace_ms` column from `subscribe`'s options, checked: None (no
    replace), 0 (replace_by_key) or the debounce window in milliseconds."""
    for name, flag in (("dedupe_by_key", dedupe_by_key), ("replace_by_key", replace_by_key)):
        if not isinstance(flag, bool):
            raise _errors.InvalidArgument(f"{name} must be True or False, got {flag!r}")
    window = None
    if debounce is not None:
        seconds = _checks.seconds("debounce_by_key", debounce)
        if seconds > MAX_WINDOW_S:
            raise _errors.InvalidArgument(
                f"debounce_by_key must be at most {MAX_WINDOW_S} s (a year), got {debounce!r}"
            )
        window = round(seconds * 1000)
    elif replace_by_key:
        window = 0
    if dedupe_by_key and window is not None:
        raise _errors.InvalidArgument(
            "dedupe_by_key keeps the older job, replace_by_key and debounce_by_key the "
            "newer: pass one of them"
        )
    return window


def split(queues: str, replacing: str) -> tuple[str, str]:
    """The batch's subscriptions (a JSON array) without the replacing ones, and those."""
    if replacing == "[]":  # the common case: no JSON to read
        return queues, replacing
    apart = set(_names(replacing))
    return _encode([q for q in _names(queues) if q not in apart]).decode(), replacing


def relay_replace(engine: _engine.Engine, conn: Any, params: dict[str, Any]) -> int:
    """The batch's jobs for the replacing subscriptions `params["queues"]`, in the relay's
    transaction on `conn`: how many were inserted or replaced.

    A job with a key of the batch that came in after `relay_release` locked the key's jobs
    (a direct enqueue of that dedupe key) and was claimed at once is left alone by the
    replace, which then writes fewer jobs than it meant: it runs again (releasing that
    one's key); after REPLACE_TRIES, DatabaseBusy rolls the batch back to be run again."""
    for _ in range(REPLACE_TRIES):
        engine.run_in(conn, "relay_release", params)
        written, meant = engine.run_in(conn, "relay_replace", params)[0]
        if int(written) >= int(meant):
            return int(written)
    raise _errors.DatabaseBusy("jobs with the batch's keys kept being claimed as it replaced them")
