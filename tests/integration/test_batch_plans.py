"""Batch statements on leased jobs never read the leases index (PostgreSQL).

`ack_many`, `renew` and `start_many` join a JSON list of (id, token) pairs to the jobs.
`lease_token = token` implies `lease_token IS NOT NULL`, the predicate of the partial
index `jobs_leases`; after a vacuum that saw no job leased, that index's statistics say
it is empty, and the planner read the whole index and hashed it instead of looking the
jobs up by id. Its real size is every leased job's entry, and every dead one an old
snapshot keeps: under bench/bloat.py an ack of 100 jobs took 16-22 ms instead of 0.4.
The token is now compared with IS NOT DISTINCT FROM (never NULL on the pairs' side), which
implies nothing about the index's predicate: the jobs are looked up by id, or read
whole when the table is small.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from alkstore import _leases, _sql
from tests.conftest import Backend


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@pytest.mark.parametrize("name", ["ack_many", "renew_many", "start_many"])
def test_batches_look_leased_jobs_up_by_id(pg_backend: Backend, name: str) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        for _ in range(3):  # a table that held more than it holds: pages, few rows
            q.enqueue_many(list(range(10_000)))
            while jobs := q.claim_many(1_000):
                q.ack_many(jobs)
        q.enqueue_many(["last"])  # the vacuum cannot give the empty pages back
        ns = store.namespace
        with psycopg.connect(pg_backend.url, autocommit=True) as pg:
            pg.execute(f"VACUUM ANALYZE {ns}.jobs")  # nothing leased: jobs_leases "empty"
            q.enqueue_many(list(range(2_000)))
            jobs = q.claim_many(2_000, start=1_000)
            held = jobs[:100]
            params: dict[str, Any] = {"now": None}
            params.update(_leases.batch_of("postgres", held))
            params["leases"] = json.dumps([[j.id, j.lease_token, 30_000] for j in jobs[:100]])
            sql = _sql.queries("alkstore.postgres", ns)[name]
            with pg.transaction(force_rollback=True):
                row = pg.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    plan = _nodes(row[0][0]["Plan"])
    scans = [n for n in plan if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]]
    indexes = {n.get("Index Name") for n in scans}
    assert scans and "jobs_leases" not in indexes, (name, [n["Node Type"] for n in scans], indexes)
    for scan in scans:  # a lookup by id, or the whole (small) table: never a whole index
        assert scan["Node Type"] == "Seq Scan" or "Index Cond" in scan, (name, scan)
