"""SQLite compiles each hot statement once per connection, not on every run.

SQLite re-compiles a cached statement before each run when its plan may depend on a
bound value (a `LIMIT :n`, a `queue = :queue` beside partial indexes): before the claim
of issue 13 that cost about 20 us of a 25 us claim. Connections set by `configure` keep
the query planner stability guarantee (QPSG), so a statement's plan never depends on
its values and it compiles once. Seen through the authorizer, which SQLite calls while
it compiles a statement, never while it runs one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

import alkstore
from alkstore import _queue, _sql
from alkstore.sqlite._seam import configure, positional

NS = "t"
# the worker's statements, with values that make each do its work
HOT: dict[str, dict[str, Any]] = {
    "claim": {
        **{"queue": "q", "now": None, "lease_ms": 1000, "n": 10, "go": 1},
        "levels": _queue.CLAIM_LEVELS,
    },
    "next_due": {"queue": "q", "now": None, "levels": _queue.DUE_LEVELS},
    "enqueue": {
        **dict.fromkeys(("run_at", "expires_at", "expires_ms", "max_attempts", "backoff")),
        **dict.fromkeys(("dedupe_key", "type", "key", "position", "headers", "now")),
        "queue": "q",
        "priority": 0,
        "delay_ms": 0,
        "payload": "{}",
    },
    "start_many": {"pairs": "[[1, 1]]"},
    "renew_many": {"leases": "[[1, 1, 1000]]", "now": None},
    "ack_many": {"pairs": "[[1, 1]]"},
    "dead_letters": {"queue": "q", "after": 0, "limit": 100},
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_hot_statement_compiles_once_not_on_every_run(tmp_path: Path, name: str) -> None:
    path = str(tmp_path / "t.db")
    store = alkstore.connect(f"sqlite:///{path}", namespace=NS)
    try:
        store.migrate()
        store.queue("q").enqueue_many(list(range(50)), delay=3600)
        store.queue("q").enqueue_many(list(range(50)))
    finally:
        store.close()
    conn = apsw.Connection(path)
    configure(conn)
    compiled: list[tuple[Any, ...]] = []

    def authorizer(*args: Any) -> int:
        compiled.append(args)
        return apsw.SQLITE_OK

    conn.authorizer = authorizer  # set first: setting it expires every cached statement
    query, bind = positional(_sql.queries("alkstore.sqlite", NS)[name])
    assert bind is not None  # bound by position, as the engine binds it
    values = bind(HOT[name])
    try:
        for run in range(3):
            if run == 1:
                compiled.clear()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(query, values).fetchall()
            conn.execute("ROLLBACK")
            assert run == 0 or not compiled, (run, compiled[:5])
    finally:
        conn.close()
