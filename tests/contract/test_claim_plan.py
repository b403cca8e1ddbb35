"""The claim reads the claim index one priority level at a time, each up to now: its cost
grows neither with the queue's depth nor with the number of delayed jobs beside the ready
ones (ADR 0006 addendum 2026-12-01).

Cost, where a plan cannot show it: on SQLite the virtual machine steps of one claim
(apsw's statement profile), on PostgreSQL the index and heap blocks its scans of the jobs
table read (EXPLAIN ANALYZE BUFFERS). Each claim runs on a connection of the test's own
and is rolled back.
"""

from __future__ import annotations

import json
import re
from typing import Any

import apsw
import psycopg
import pytest

import alkstore
from alkstore import _queue, _sql
from alkstore.sqlite._seam import configure
from tests.conftest import Backend

SMALL = 200  # delayed jobs beside the ready ones, then
BIG = 30_000  # (PostgreSQL: the walk of these reads ~150 index blocks)
# What a deeper index may add on PostgreSQL: a block per descent, a few descents per level.
PG_DEEPER = 24


def _fill(store: alkstore.Store, n: int) -> None:
    q = store.queue("deep")
    for start in range(0, n, 1000):
        q.enqueue_many(list(range(start, min(n, start + 1000))))


def test_claim_uses_the_claim_index_without_sorting(
    store: alkstore.Store, backend: Backend
) -> None:
    _fill(store, 5000)
    params = _params(n=10, now=2**50)
    if backend.name == "sqlite":
        sql = _sql.queries("alkstore.sqlite", backend.namespace)["claim"]
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
        configure(conn)  # planned as the engine's connections plan it
        try:
            conn.execute("ANALYZE")
            plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        finally:
            conn.close()
        assert f"USING INDEX {backend.namespace}__jobs_claim" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort step
    else:
        sql = _sql.queries("alkstore.postgres", backend.namespace)["claim"]
        with psycopg.connect(backend.url, autocommit=True) as pg:
            pg.execute(f"ANALYZE {backend.namespace}.jobs")
            row = pg.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
            assert row is not None
            text = json.dumps(row[0])
        assert '"Index Name": "jobs_claim"' in text, text
        # the only sort is of the <= n claimed rows (the start ranking), never of the queue
        for node in _nodes(row[0][0]["Plan"]):
            if node["Node Type"] == "Sort":
                below = _nodes(node)
                assert not any(n.get("Relation Name") == "jobs" for n in below), text
                assert any(n.get("CTE Name") == "next" for n in below), text


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(_nodes(child))
    return found


def _params(n: int = 100, now: int | None = None) -> dict[str, Any]:
    return {
        "queue": "deep",
        "now": now,
        "lease_ms": 30_000,
        "n": n,
        "go": 1,
        "levels": _queue.CLAIM_LEVELS,
    }


def _claim_cost(backend: Backend, params: dict[str, Any]) -> tuple[int, int]:
    """(cost, jobs claimed) of one claim, rolled back: SQLite's VM steps, PostgreSQL's
    blocks read by the scans that find the jobs (the update of the claimed rows left out)."""
    if backend.name == "sqlite":
        sql = _sql.queries("alkstore.sqlite", backend.namespace)["claim"]
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
        configure(conn)
        steps: list[int] = []

        def profile(event: dict[str, Any]) -> None:
            if event["sql"] == sql:
                steps.append(event["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"])

        conn.trace_v2(apsw.SQLITE_TRACE_PROFILE, profile)
        try:
            conn.execute("BEGIN IMMEDIATE")
            claimed = len(conn.execute(sql, params).fetchall())
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return steps[-1], claimed
    sql = _sql.queries("alkstore.postgres", backend.namespace)["claim"]
    with psycopg.connect(backend.url, autocommit=True) as pg:
        # the index entries an earlier rolled-back claim left would be read again
        pg.execute(f"VACUUM {backend.namespace}.jobs")
        with pg.transaction(force_rollback=True):
            explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql
            row = pg.execute(explain, params).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    finding = [n for n in _nodes(top) if n.get("Subplan Name", "").startswith("CTE ")]
    scans = [  # in the CTEs that find the jobs; the update's lookups of them by id left out
        n
        for cte in finding
        for n in _nodes(cte)
        if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]
    ]
    blocks = sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in scans)
    return blocks, top["Actual Rows"]


def _delay(q: alkstore.Queue, levels: list[int], total: int) -> None:
    """`total` jobs delayed by an hour, spread over the priority levels."""
    for i, priority in enumerate(levels):
        count = total // len(levels) + (i < total % len(levels))
        for start in range(0, count, 10_000):
            batch = list(range(start, min(count, start + 10_000)))
            q.enqueue_many(batch, priority=priority, delay=3600)


CASES = {  # priority levels of the delayed jobs; ready jobs per level
    "one level, none ready": ([0], {}),
    "one level, one ready": ([0], {0: 1}),
    "three levels, ten ready in the middle one": ([5, 0, -5], {0: 10}),
    "three levels, one ready in the lowest": ([5, 0, -5], {-5: 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_claim_never_walks_the_delayed_jobs(
    store: alkstore.Store, backend: Backend, case: str
) -> None:
    """A claim for more jobs than are ready costs the same beside 200 or 30,200 delayed
    jobs (the walk of the index before: ~4 VM steps per delayed job on SQLite, every index
    block of the queue on PostgreSQL)."""
    levels, ready = CASES[case]
    q = store.queue("deep")
    _delay(q, levels, SMALL)
    for priority, count in ready.items():
        q.enqueue_many(list(range(count)), priority=priority)
    small, claimed = _claim_cost(backend, _params())
    assert claimed == sum(ready.values())
    _delay(q, levels, BIG - SMALL)
    big, claimed = _claim_cost(backend, _params())
    assert claimed == sum(ready.values())
    assert big <= small + (0 if backend.name == "sqlite" else PG_DEEPER), (small, big)


def test_a_claim_the_top_level_fills_looks_at_no_other_level(
    store: alkstore.Store, backend: Backend
) -> None:
    """Levels are found one at a time, as the claim needs them: 40 more levels of delayed
    jobs below a top level with enough ready jobs cost the claim nothing."""
    q = store.queue("deep")
    q.enqueue_many(list(range(100)), priority=50)
    alone, claimed = _claim_cost(backend, _params())
    assert claimed == 100
    for priority in range(40):
        q.enqueue_many(list(range(50)), priority=priority, delay=3600)
    beside, claimed = _claim_cost(backend, _params())
    assert claimed == 100
    assert beside <= alone + (0 if backend.name == "sqlite" else PG_DEEPER), (alone, beside)


def test_a_claim_range_scans_each_level_up_to_now(backend: Backend) -> None:
    """The plan: per priority level, a range of the claim index ending at now, read in
    order (no sort), the top level first (SQLite: the first arm, the lower levels only in
    the second; PostgreSQL: a nested loop over the levels, each a LATERAL scan)."""
    with backend.migrated() as store:
        _delay(store.queue("deep"), [1, 0], 2000)
        if backend.name == "sqlite":
            sql = _sql.queries("alkstore.sqlite", backend.namespace)["claim"]
            conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
            configure(conn)
            try:
                conn.execute("ANALYZE")
                plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, _params())]
            finally:
                conn.close()
            level = f"USING INDEX {backend.namespace}__jobs_claim (queue=? AND priority=? AND "
            level += "visible_at<?)"
            at = [i for i, step in enumerate(plan) if step.endswith(level)]
            first, rest = plan.index("LEFT-MOST SUBQUERY"), plan.index("MATERIALIZE levels")
            assert len(at) == 2 and first < at[0] < rest < at[1], plan
            assert not [step for step in plan if "TEMP B-TREE" in step], plan
            return
        sql = _sql.queries("alkstore.postgres", backend.namespace)["claim"]
        with psycopg.connect(backend.url, autocommit=True) as pg:
            pg.execute(f"ANALYZE {backend.namespace}.jobs")
            row = pg.execute("EXPLAIN (FORMAT JSON) " + sql, _params()).fetchone()
        assert row is not None
        text = json.dumps(row[0])
        nodes = _nodes(row[0][0]["Plan"])
        ranges = [
            n
            for n in nodes
            if n.get("Index Name") == "jobs_claim"
            and re.search(r"\(priority = l(_\d+)?\.priority\)", n.get("Index Cond", ""))
            and "(visible_at <= " in n.get("Index Cond", "")
        ]
        assert ranges, text
        loops = [n for n in nodes if n["Node Type"] == "Nested Loop"]
        assert any(
            n["Plans"][0].get("CTE Name") == "levels" and n["Plans"][0]["Node Type"] == "CTE Scan"
            for n in loops
        ), text
        assert not any(n["Node Type"] == "Sort" for n in nodes), text
