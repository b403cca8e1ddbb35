"""Retention with nothing to delete costs the same beside a few or many rows (ADR 0018):
dead-letter retention reads one index entry per queue and a range of the (queue, died_at)
index, log pruning the oldest batch of events. Before, a sweep with retention read every
dead letter of the queues, and a prune every event the slowest checkpoint had passed.

Cost as tests/contract/test_claim_plan.py measures it: SQLite's virtual machine steps of
the statement, PostgreSQL's blocks read by its scans of the table; each statement runs on
a connection of the test's own and is rolled back.
"""

from __future__ import annotations

from typing import Any

import apsw
import psycopg

import alkstore
from alkstore import _maintenance, _sql
from alkstore.sqlite._seam import configure
from tests.conftest import Backend
from tests.events import OrderPlaced

PG_DEEPER = 24  # blocks a deeper index may add on PostgreSQL (a few descents)
DAY_MS = 86_400_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(_nodes(child))
    return found


def _cost(backend: Backend, name: str, params: dict[str, Any], table: str) -> tuple[int, int]:
    """(cost, rows deleted) of one run of a named query, rolled back."""
    if backend.name == "sqlite":
        sql = _sql.queries("alkstore.sqlite", backend.namespace)[name]
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
        configure(conn)
        steps: list[int] = []

        def profile(event: dict[str, Any]) -> None:
            if event["sql"] == sql:
                steps.append(event["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"])

        conn.trace_v2(apsw.SQLITE_TRACE_PROFILE, profile)
        try:
            conn.execute("BEGIN IMMEDIATE")
            deleted = len(conn.execute(sql, params).fetchall())
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return steps[-1], deleted
    sql = _sql.queries("alkstore.postgres", backend.namespace)[name]
    with psycopg.connect(backend.url, autocommit=True) as pg:
        pg.execute(f"VACUUM ANALYZE {backend.namespace}.{table}")
        with pg.transaction(force_rollback=True):
            row = pg.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    scans = [n for n in _nodes(top) if n.get("Relation Name") == table and "Scan" in n["Node Type"]]
    return sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in scans), top["Actual Rows"]


def _dead_letters(store: alkstore.Store, backend: Backend, n: int) -> None:
    """`n` fresh dead letters spread over three queues (written directly: fast)."""
    ns = backend.namespace
    now = store.engine.now_ms()
    if backend.name == "sqlite":
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
        try:
            start = conn.execute(f"SELECT coalesce(max(id), 0) FROM {ns}__dead_letters").fetchall()
            conn.execute(
                f"""WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
                INSERT INTO {ns}__dead_letters (id, queue, priority, enqueued_at, attempts,
                    max_attempts, payload, history, reason, died_at)
                SELECT ? + i, 'q' || (i % 3), 0, ?, 1, 1, '{{}}', '[]', 'x', ? FROM g""",
                (n, start[0][0], now, now),
            )
        finally:
            conn.close()
        return
    with psycopg.connect(backend.url, autocommit=True) as pg:
        pg.execute(
            f"""INSERT INTO {ns}.dead_letters (id, queue, priority, enqueued_at, attempts,
                max_attempts, payload, history, reason, died_at)
            SELECT (SELECT coalesce(max(id), 0) FROM {ns}.dead_letters) + i, 'q' || mod(i, 3),
                   0, %(now)s, 1, 1, '{{}}', '[]', 'x', %(now)s
            FROM generate_series(1, %(n)s) AS i""",
            {"n": n, "now": now},
        )


def test_dead_letter_retention_reads_one_range_per_queue(
    store: alkstore.Store, backend: Backend
) -> None:
    params = {"now": None, "default_ms": 14 * DAY_MS, "batch": 1_000}
    _dead_letters(store, backend, 300)
    few, deleted = _cost(backend, "sweep_retention", params, "dead_letters")
    assert deleted == 0
    _dead_letters(store, backend, 6_000)
    many, deleted = _cost(backend, "sweep_retention", params, "dead_letters")
    assert deleted == 0
    assert many <= few + (0 if backend.name == "sqlite" else PG_DEEPER), (few, many)


def test_a_prune_with_nothing_to_do_reads_one_batch(
    store: alkstore.Store, backend: Backend
) -> None:
    store.subscribe("all", ["*"], start="beginning")
    batch = _maintenance.LOG_BATCH

    def grow(n: int) -> None:
        with store.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=i) for i in range(n)])
        while store.relay_batch()[1]:
            pass

    params = {"before": store.engine.now_ms() - 7 * DAY_MS, "batch": batch}
    grow(batch + 200)  # every event relayed, none old enough
    few, deleted = _cost(backend, "prune_log", params, "events")
    assert deleted == 0
    grow(6_000)
    many, deleted = _cost(backend, "prune_log", params, "events")
    assert deleted == 0
    assert many <= few + (0 if backend.name == "sqlite" else PG_DEEPER), (few, many)
