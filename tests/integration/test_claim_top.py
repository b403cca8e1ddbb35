"""The top level's claim (PostgreSQL; alkstore/_cursor.py `Claims`).

A claimer whose last claim was filled from one priority level claims from that level's
range alone (`claim_top`), which skips the full claim's level probes and walk. What a
`claim_many` returns must not change: when the top level runs short, a full claim takes
the rest in the same call, and a job enqueued at a higher level is taken first.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import Backend


class Spy:
    """An engine whose statements' names are recorded."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.names: list[str] = []

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        self.names.append(name)
        return self.engine.run(name, params)  # type: ignore[no-any-return]


def test_a_claimer_filled_from_one_level_claims_it_alone_and_loses_no_job(
    pg_backend: Backend,
) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        high = q.enqueue_many([{"p": 0, "i": i} for i in range(250)])
        low = q.enqueue_many([{"p": -1, "i": i} for i in range(80)], priority=-1)
        spy = Spy(q._claims._engine)  # type: ignore[union-attr]
        q._claims._engine = spy  # type: ignore[union-attr]
        got: list[list[int]] = []
        for _ in range(3):
            jobs = q.claim_many(100)
            got.append([job.id for job in jobs])
        assert spy.names == ["claim", "claim_top", "claim_top", "claim"]
        assert got[0] + got[1] == high[:200]
        assert got[2] == high[200:] + low[:50]  # the top ran short: the rest from below
        spy.names.clear()
        jobs = q.claim_many(100)
        assert [job.id for job in jobs] == low[50:]
        assert spy.names == ["claim"]  # the last claim came from two levels: a full one


def test_a_job_of_a_higher_level_is_taken_first_by_the_top_claim(pg_backend: Backend) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        ready = q.enqueue_many([{"i": i} for i in range(300)])
        spy = Spy(q._claims._engine)  # type: ignore[union-attr]
        q._claims._engine = spy  # type: ignore[union-attr]
        first = q.claim_many(100)
        urgent = q.enqueue({"urgent": True}, priority=5)
        second = q.claim_many(100)
        assert [job.id for job in first] == ready[:100]
        assert [job.id for job in second] == [urgent, *ready[100:199]]
        assert spy.names == ["claim", "claim_top", "claim"]
        third = q.claim_many(100)  # two levels in the last claim: a full one
        assert [job.id for job in third] == ready[199:299]
        assert spy.names[-1] == "claim"


def test_a_paused_queue_gives_nothing_to_the_top_claim(pg_backend: Backend) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        q.enqueue_many([{"i": i} for i in range(300)])
        assert len(q.claim_many(100)) == 100
        q.pause()
        assert q.claim_many(100) == []
        q.resume()
        assert len(q.claim_many(100)) == 100
