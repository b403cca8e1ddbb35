"""Replace (debounce) and look-ups by dedupe key (docs/adr/0022), written once above the
engines as the named queries of each engine's `sql/effects.sql`.

`on_duplicate="replace"`: a job enqueued with a dedupe key that a *waiting* job holds
replaces that job in place (its id is kept; payload, options and run time are the new
job's; attempts and history start over). With `delay=window` that is a debounce: every
enqueue within the window pushes the run back and keeps the newest payload. A job a
worker holds (running, or prefetched) is not touched: it gives up its key and the new
job is inserted beside it (graphile-worker's job_key_mode=replace does the same). In an
ordered queue a waiting job of another key (the new job names another group) is deleted
and the new job inserted in its own key's order, behind that key's head (a new id).
"""

from __future__ import annotations

from typing import Any

from alkstore import _engine, _errors

REPLACE_TRIES = 3  # rounds of replace / release / insert against concurrent enqueuers


def replace_in(engine: _engine.Engine, conn: Any, params: dict[str, Any]) -> int:
    """Enqueue one job with on_duplicate="replace" inside the transaction on `conn`; its
    id (the replaced job's when a waiting one held the key)."""
    if params["dedupe_key"] is None:
        raise _errors.InvalidArgument('on_duplicate="replace" needs a dedupe_key')
    for _ in range(REPLACE_TRIES):
        rows = engine.run_in(conn, "enqueue_replace", params)
        if rows:
            return int(rows[0][0])
        engine.run_in(conn, "release_key", params)  # a worker holds the key's job
        engine.run_in(conn, "drop_moved", params)  # a waiting job in another key's order
        rows = engine.run_in(conn, "enqueue_dedupe", params)
        if rows:
            return int(rows[0][0])
    # Another transaction took the key each time (PostgreSQL, under heavy contention).
    raise _errors.DuplicateJob(params["queue"], params["dedupe_key"])


def job_by_key(engine: _engine.Engine, queue: str, key: str) -> int | None:
    """The id of the live job of `queue` holding dedupe key `key` (None: none does)."""
    rows = engine.run("job_by_key", {"queue": queue, "key": key})
    return int(rows[0][0]) if rows else None


def holds(engine: _engine.Engine, job_id: int, token: int | None) -> bool:
    """Does this claim (id, lease token) still hold its job?"""
    return bool(engine.run("lease_check", {"id": job_id, "token": token}))
