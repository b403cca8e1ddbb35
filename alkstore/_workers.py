"""Live workers: each running worker keeps a row in the namespace's workers table
(docs/adr/0018-live-workers-status-retention.md).

A worker inserts its row when it starts (`store.worker_presence`), refreshes
`last_seen` every HEARTBEAT seconds while it runs (on its lease renewal's reserved
connection: `Renewal.beat`), and deletes the row when it stops cleanly. A row not
seen for DEAD_AFTER seconds is a dead worker (killed, frozen, cut off from the
database); the sweep deletes rows not seen for FORGET_AFTER seconds. Times are the
store's clock (the database's unless one was injected, ADR 0012).

At each refresh a worker also writes what it has done since it started, per queue
(`counts`: done, retried, dead), so readers can take throughput from the rows without
a write per job (docs/adr/0023, addendum).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from alkstore import _checks, _config, _jobs

if TYPE_CHECKING:
    from alkstore._queue import Runtime

HEARTBEAT = 10.0  # seconds between a running worker's refreshes of its row
DEAD_AFTER = 3 * HEARTBEAT  # a row not seen for this long is a dead worker
FORGET_AFTER = 3_600.0  # the sweep deletes rows not seen for this long

_encode = msgspec.json.Encoder().encode
_names = msgspec.json.Decoder(list[str])
_counts = msgspec.json.Decoder(dict[str, dict[str, int]])
Counts = Mapping[str, Mapping[str, int]]  # queue -> {"done": n, "retried": n, "dead": n}


class WorkerInfo(msgspec.Struct, frozen=True):
    """A worker process as its row says: `alive` is False once it has not been seen for
    DEAD_AFTER seconds (it was killed or lost the database), `seen_ago` in seconds.
    `counts`: per queue it serves, the jobs it has acked (`done`), retried (`retried`:
    failed attempts that run again) and dead-lettered (`dead`) since `started_at`, as of
    `last_seen`; None when the row carries none (written without counts)."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_seen: datetime
    alive: bool
    seen_ago: float
    counts: dict[str, dict[str, int]] | None = None


class Presence:
    """A running worker's row. Get one with `store.worker_presence(...)` (which inserts
    it); refresh it every `every` seconds (`Renewal.beat`), `leave()` on a clean stop.
    `counts`, if given, is called at each refresh: what this worker has done since it
    started, per queue (`WorkerInfo.counts`)."""

    def __init__(
        self,
        runtime: Runtime,
        queues: Iterable[str],
        concurrency: int,
        counts: Callable[[], Counts] | None = None,
    ) -> None:
        names = [_config.check_name("queue", q) for q in queues]
        self._rt = runtime
        self.id = secrets.token_hex(8)
        self.every = HEARTBEAT
        self.started_at: int | None = None
        self._counts = counts
        self._params: dict[str, Any] = {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": _encode(names).decode(),
            "concurrency": _checks.whole("concurrency", concurrency, 1),
        }

    def params(self) -> dict[str, Any]:
        """The upsert's parameters (`worker_seen`), at the store's time now."""
        counts = None if self._counts is None else _encode(self._counts()).decode()
        return {
            **self._params,
            "started_at": self.started_at,
            "now": self._rt.now_param(),
            "counts": counts,
        }

    def seen(self, rows: list[tuple[Any, ...]]) -> None:
        """Keep the start time the first upsert stored (a row the sweep aged out while
        this worker could not reach the database comes back with it)."""
        if rows and self.started_at is None:
            self.started_at = int(rows[0][0])

    def announce(self) -> None:
        self.seen(self._rt.engine.run("worker_seen", self.params()))

    def leave(self) -> None:
        """Delete the row (a clean stop)."""
        self._rt.engine.run("worker_leave", {"id": self.id})

    def __repr__(self) -> str:
        return f"<alkstore.Presence {self.id} pid={self._params['pid']}>"


def workers(runtime: Runtime) -> list[WorkerInfo]:
    """Every worker row, oldest start first, live ones and those not aged out yet."""
    dead_ms = DEAD_AFTER * 1000
    found = []
    for wid, host, pid, queues, concurrency, started, seen, now, counts in runtime.engine.run(
        "workers_list", {"now": runtime.now_param()}
    ):
        ago = max(0, int(now) - int(seen))
        found.append(
            WorkerInfo(
                wid,
                host,
                int(pid),
                _names.decode(queues),
                int(concurrency),
                _jobs.from_ms(int(started)),
                _jobs.from_ms(int(seen)),
                ago < dead_ms,
                ago / 1000,
                None if counts is None else _counts.decode(counts),
            )
        )
    return found


def forget(runtime: Runtime, now: int | None) -> int:
    """Delete the rows of workers not seen for FORGET_AFTER seconds (the sweep's)."""
    params = {"now": now, "forget_ms": int(FORGET_AFTER * 1000)}
    return len(runtime.engine.run("sweep_workers", params))
