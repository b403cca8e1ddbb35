"""The claim query walks the claim index: its cost does not grow with queue depth."""

from __future__ import annotations

import json
from typing import Any

import apsw
import psycopg

import alkstore
from alkstore import _sql
from tests.conftest import Backend


def _fill(store: alkstore.Store, n: int) -> None:
    q = store.queue("deep")
    for start in range(0, n, 1000):
        q.enqueue_many(list(range(start, min(n, start + 1000))))


def test_claim_uses_the_claim_index_without_sorting(
    store: alkstore.Store, backend: Backend
) -> None:
    _fill(store, 5000)
    params: dict[str, Any] = {"queue": "deep", "now": 2**50, "lease_ms": 1000, "n": 10, "go": 1}
    if backend.name == "sqlite":
        sql = _sql.queries("alkstore.sqlite", backend.namespace)["claim"]
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
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
