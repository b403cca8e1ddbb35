"""The relay seeks the batch's range of the log: its cost does not grow with the log.

A log of 200k events, the subscription 100 events behind the head: the plan of
`relay_insert` must read a bounded range of positions (SQLite: a rowid range with a
lower bound, not a walk from position 1; PostgreSQL: an index range scan the planner
estimates at about the batch's size, so the cost stays far below `jit_above_cost`), and
on PostgreSQL the batch's transaction runs without JIT. See docs/adr/0011.
"""

from __future__ import annotations

import json
import re
from typing import Any

import apsw
import psycopg

import alkstore
from alkstore import _sql
from alkstore.sqlite._seam import configure
from tests.conftest import Backend

LOG = 200_000
BEHIND = 100  # events the subscription has not relayed yet
MAX_COST = 5_000  # a twentieth of jit_above_cost; measured ~1,200 (mostly the default
# estimates of the small, never-analyzed subscriptions and queues tables), 16,500 before


def _fill_sqlite(path: str, namespace: str) -> None:
    conn = apsw.Connection(path)
    try:
        conn.execute(
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
            f"INSERT INTO {namespace}__events (type, payload, appended_at) "
            "SELECT 'plan.event', '{}', 0 FROM c",
            (LOG,),
        )
    finally:
        conn.close()


def _fill_postgres(url: str, namespace: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {namespace}.events (position, type, payload) "
                "SELECT g, 'plan.event', '{}' FROM generate_series(1, %s) AS g",
                (LOG,),
            )
            conn.execute(f"UPDATE {namespace}.log_head SET head = %s", (LOG,))
        conn.execute(f"ANALYZE {namespace}.events")


def _subscribed_behind(store: alkstore.Store, backend: Backend) -> None:
    """A 200k-event log, one subscription BEHIND events short of the head."""
    if backend.name == "sqlite":
        _fill_sqlite(backend.url.removeprefix("sqlite:///"), backend.namespace)
    else:
        _fill_postgres(backend.url, backend.namespace)
    store.subscribe("plan", ["plan.*"], start=LOG - BEHIND + 1)


def _sqlite_plan(backend: Backend, name: str, params: dict[str, Any]) -> str:
    sql = _sql.queries("alkstore.sqlite", backend.namespace)[name].split(";")[0]  # the INSERT
    conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
    configure(conn)  # planned as the engine's connections plan it
    try:
        return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def _check_bounded(top: dict[str, Any], low: int) -> None:
    """An index range scan on events from `low` on, estimated at the batch's size."""
    text = json.dumps(top)
    scans = [n for n in _nodes(top["Plan"]) if n.get("Relation Name") == "events"]
    assert [n["Node Type"] for n in scans] == ["Index Scan"], text
    assert scans[0]["Index Name"] == "events_position", text
    cond = scans[0]["Index Cond"]
    assert f"> '{low}'" in cond or f"> {low}" in cond, text  # the lower bound is a constant
    assert scans[0]["Plan Rows"] < 10 * BEHIND, text  # the range, not a third of the log
    assert top["Plan"]["Total Cost"] < MAX_COST, text  # far below jit_above_cost (100000)
    assert "JIT" not in top, text


def test_relay_seeks_the_batch_range_of_a_large_log(
    store: alkstore.Store, backend: Backend
) -> None:
    _subscribed_behind(store, backend)
    low, high = LOG - BEHIND, LOG
    params: dict[str, Any] = {"low": low, "high": high, "now": 0, "queues": '["plan"]'}
    if backend.name == "sqlite":
        plan = _sqlite_plan(backend, "relay_insert", params)
        # a range on the rowid with both bounds: no walk from position 1 (`rowid<?` alone)
        seek = r"SEARCH e USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)"
        assert re.search(seek, plan), plan
        assert "TEMP B-TREE" not in plan, plan  # jobs come out in (queue, position) order
        bounds = _sqlite_plan(backend, "relay_bounds", {"batch": 5000})
        assert f"SEARCH {backend.namespace}__events USING INTEGER PRIMARY KEY (rowid>?)" in bounds
    else:
        queries = _sql.queries("alkstore.postgres", backend.namespace)
        with psycopg.connect(backend.url, autocommit=True) as pg:
            session = pg.execute("SHOW jit").fetchone()
            with pg.transaction():
                pg.execute("SET LOCAL jit = on")
                pg.execute("SET LOCAL jit_above_cost = 100000")  # the default, whatever is set
                row = pg.execute("EXPLAIN (FORMAT JSON) " + queries["relay_insert"], params)
                explained = row.fetchone()
                assert explained is not None
                _check_bounded(explained[0][0], low)
                # relay_bounds turns JIT off for the rest of the batch's transaction only
                got = pg.execute(queries["relay_bounds"], {"batch": 5000}).fetchone()
                assert got is not None and tuple(got[:2]) == (low, high)
                assert pg.execute("SHOW jit").fetchone() == ("off",)
            assert pg.execute("SHOW jit").fetchone() == session, "SET LOCAL leaked into the session"
    # and the relay covers exactly the events behind, on the large log
    assert store.relay_batch() == (BEHIND, BEHIND)
    assert store.relay_batch() == (0, 0)


def test_replacing_subscriptions_seek_the_batch_range_too(
    store: alkstore.Store, backend: Backend
) -> None:
    """replace_by_key's statements (fanout.sql) read the same bounded range of the log,
    and find the batch's keys' jobs through the dedupe index, not by reading the queue."""
    _subscribed_behind(store, backend)
    store.subscribe("plan", ["plan.*"], replace_by_key=True)
    low, high = LOG - BEHIND, LOG
    params: dict[str, Any] = {"low": low, "high": high, "now": 0, "queues": '["plan"]'}
    if backend.name == "sqlite":
        seek = r"SEARCH e USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)"
        for name in ("relay_replace", "relay_release"):
            plan = _sqlite_plan(backend, name, params)
            assert re.search(seek, plan), (name, plan)
        release = _sqlite_plan(backend, "relay_release", params)
        assert f"SEARCH j USING INDEX {backend.namespace}__jobs_dedupe" in release, release
    else:
        queries = _sql.queries("alkstore.postgres", backend.namespace)
        with psycopg.connect(backend.url, autocommit=True) as pg:
            with pg.transaction():
                pg.execute("SET LOCAL jit = off")  # as relay_bounds leaves the batch's
                for name in ("relay_replace", "relay_release"):
                    row = pg.execute("EXPLAIN (FORMAT JSON) " + queries[name], params)
                    explained = row.fetchone()
                    assert explained is not None
                    _check_bounded(explained[0][0], low)
    assert store.relay_batch() == (BEHIND, BEHIND)  # no keys: one job per event
    assert store.relay_batch() == (0, 0)
