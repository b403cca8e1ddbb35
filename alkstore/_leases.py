"""Renewing many leases at once, on a connection nothing else uses (docs/adr/0012).

A worker's handlers may hold every pooled connection (PostgreSQL) or take
SQLite's write lock one after another; a renewal that queued behind them would
let leases run out under jobs that are still running. `Renewal` renews all the
leases it is given in one statement per call, on the engine's reserved
connection: its own PostgreSQL session, or an SQLite connection that goes first
for the write lock within its process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from alkstore._jobs import Job
    from alkstore._queue import Runtime
    from alkstore._workers import Presence

_encode = msgspec.json.Encoder().encode


def batch(engine: str, ids: list[int], tokens: list[int]) -> dict[str, str]:
    """The jobs of a batch statement (`start_many`, `ack_many`), by id and lease token,
    as its parameters.

    PostgreSQL: `ids` and `tokens`, two bigint[] literals. Taking jsonb pairs apart cost
    the server about 14k instructions more per job (each number goes jsonb -> numeric ->
    text -> bigint; callgrind on the backend, docs/performance.md issue 12; in CPU time
    the difference stayed within a drain's noise). SQLite: `pairs`, JSON for json_each."""
    if engine == "postgres":
        return {
            "ids": "{" + ",".join(map(str, ids)) + "}",
            "tokens": "{" + ",".join(map(str, tokens)) + "}",
        }
    return {"pairs": _encode(list(zip(ids, tokens, strict=True))).decode()}


def batch_of(engine: str, jobs: Iterable[Job[Any]]) -> dict[str, str]:
    """`batch` of these jobs."""
    held = list(jobs)
    return batch(engine, [job.id for job in held], [job.lease_token for job in held])


class Renewal:
    """Get one with `store.renewal()`; one thread uses it; `close()` when done."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._conn = runtime.engine.reserved()

    def renew(self, jobs: Iterable[Job[Any]]) -> list[Job[Any]]:
        """Extend each job's lease by its own length from now; return the jobs whose lease
        was lost (claimed again by someone else, or finished). A lease that ran out but
        that nobody claimed since is renewed (ADR 0012). StorageError if the database
        cannot be reached: nothing was renewed, try again."""
        held = list(jobs)
        if not held:
            return []
        leases = _encode([[job.id, job.lease_token, job.lease_ms] for job in held]).decode()
        rows = self._conn.run("renew_many", {"leases": leases, "now": self._rt.now_param()})
        renewed = {(row[0], row[1]) for row in rows}
        return [job for job in held if (job.id, job.lease_token) not in renewed]

    def mark_started(self, jobs: Iterable[Job[Any]]) -> None:
        """`Queue.start_many` on this connection: prefetched jobs whose handlers started
        count their attempt (ADR 0012)."""
        held = list(jobs)
        if held:
            params: dict[str, Any] = batch_of(self._rt.engine.name, held)
            params["now"] = self._rt.now_param()
            self._conn.run("start_many", params)

    def beat(self, presence: Presence) -> None:
        """Refresh a worker's row (`store.worker_presence`), with its counts if it keeps
        any, on this connection: a worker whose handlers hold every pooled connection is
        still seen alive (docs/adr/0018).
        StorageError if the database cannot be reached: try again."""
        presence.seen(self._conn.run("worker_seen", presence.params()))

    def close(self) -> None:
        self._conn.close()
