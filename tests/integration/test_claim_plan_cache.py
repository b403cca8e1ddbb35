"""The claim is planned once per pooled connection, not on every run (PostgreSQL).

psycopg prepares a statement on its 5th run; from then on PostgreSQL reuses one generic
plan unless that plan's estimated cost is above the average of the per-run plans. The
claim joined the jobs it found back to the table, and the planner's guess of how many
those are (a tenth of what the scan may find, for `LIMIT $n`) priced the generic join
above the per-run plans: beside 20,000 delayed jobs every claim was planned again, the
walk before issue 13 (0.24 ms a run) as the per-level claim (0.6 ms). Updating them
through `id = ANY(ARRAY(...))` takes the guess out (docs/adr/0006, addendum of 2026-12-02).
"""

from __future__ import annotations

import pytest

from tests.conftest import Backend


@pytest.mark.parametrize("ready", [0, 100])
def test_the_claim_runs_one_generic_plan(pg_backend: Backend, ready: int) -> None:
    with pg_backend.migrated(pool_size=1) as store:  # every statement on one session
        q = store.queue("q")
        q.enqueue_many(list(range(20_000)), delay=3600)
        with store.transaction() as tx:
            tx.connection.execute(f"ANALYZE {store.namespace}.jobs")
        q.enqueue_many(list(range(ready)))
        for _ in range(20):
            jobs = q.claim_many(100)
            assert len(jobs) == ready
            for job in jobs:
                job.release()
        with store.transaction() as tx:
            plans = tx.connection.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
            ).fetchall()
    assert len(plans) == 1, plans
    generic, custom = plans[0]
    assert custom <= 5 and generic >= 10, plans  # psycopg prepares at the 5th run
