"""The claim is planned once per pooled connection, not on every run (PostgreSQL).

psycopg prepares a statement on its 5th run; from then on PostgreSQL reuses one generic
plan unless that plan's estimated cost is above the average of the per-run plans. Beside
100,000 delayed jobs the walk before issue 13 was planned again on every run (0.17 ms of
planning), and so was the per-level claim while the planner saw the run's values: it
priced a per-run plan by the delayed jobs it knew of, and the generic plan by a guess of
how many are ready (0.45 ms of planning a run). Now the queue, now and n reach it as
sub-selects, and the claimed jobs are updated through `id = ANY(ARRAY(...))` rather than
a join priced by a guess of how many they are: both plans cost the same and the generic
one is kept (docs/adr/0006, addendum of 2026-12-01).
"""

from __future__ import annotations

import pytest

from tests.conftest import Backend

# The full claim, and the top level's claim that follows a claim filled from one level
# (alkstore/_cursor.py `Claims`): each must keep one generic plan.
FULL = "statement LIKE 'WITH RECURSIVE levels%%'"
TOP = "statement LIKE 'WITH next AS%%' AND statement NOT LIKE '%%jsonb_array_elements%%'"


@pytest.mark.parametrize(
    ("ready", "n", "which"), [(0, 100, FULL), (100, 101, FULL), (100, 100, TOP)]
)
def test_the_claim_runs_one_generic_plan(
    pg_backend: Backend, ready: int, n: int, which: str
) -> None:
    """`n` > `ready`: no claim fills, every claim is a full one; `n` == `ready`: the first
    claim fills from the one level, and the 20 after it are top claims."""
    with pg_backend.migrated(pool_size=1) as store:  # every statement on one session
        q = store.queue("q")
        q.enqueue_many(list(range(100_000)), delay=3600)
        with store.transaction() as tx:
            tx.connection.execute(f"ANALYZE {store.namespace}.jobs")
        q.enqueue_many(list(range(ready)))
        for _ in range(21):  # the top claims run 20 times: prepared at the 6th
            jobs = q.claim_many(n)
            assert len(jobs) == ready
            for job in jobs:
                job.release()
        with store.transaction() as tx:
            plans = tx.connection.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%%claimed_for = j.visible_at%%'"  # the claim alone: a
                # claim that runs past a second also buries exhausted jobs (SKIP LOCKED too),
                # and a claim from the cursor (docs/adr/0027) is another statement
                " AND " + which
            ).fetchall()
    assert len(plans) == 1, plans
    generic, custom = plans[0]
    assert custom <= 5 and generic >= 10, plans  # psycopg prepares at the 5th run
