"""Cluster-wide concurrency and rate limits (docs/adr/0021) against a model, driven by
a hypothesis state machine with an injected clock.

Rules enqueue jobs on a few keys (or none), claim one or several (started now or
prefetched), ack, retry, let time pass (leases lapse: their slots come back), and
change the limits. Each claim must hand out exactly the jobs the model predicts: in
claim order, skipping jobs whose key is at its limit, and no more than the queue's
limit leaves (leases that have not run out) and the rate window leaves (the sliding
window counter of the ADR). Checked after every step: leases never exceed the
queue's or a key's limit, and no aligned rate period holds more starts than allowed.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

import alkstore
from alkstore import _ordering
from tests.conftest import Backend
from tests.machines import StoreMachine

QUEUE = "limited"
VISIBILITY_MS = 2_000
PERIOD_MS = 1_000
KEYS = ["a", "b", "c"]
# 150: a seeded off-by-one in the key rate was caught at 150 examples, not at 40
EXAMPLES = int(os.environ.get("ALKSTORE_LIMITS_EXAMPLES", "150"))
STEPS = int(os.environ.get("ALKSTORE_LIMITS_STEPS", "40"))
bounds = st.one_of(st.none(), st.integers(1, 4))
rates = st.one_of(st.none(), st.integers(1, 3))  # small: so that they bind


@dataclass
class Job:
    id: int
    key: str | None
    due: int
    token: int | None = None


class Model:
    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.limit: int | None = None
        self.key_limit: int | None = None
        self.rate: int | None = None
        self.key_rate: int | None = None
        self.window: tuple[int, int, int] | None = None  # window_start, prev, cur
        self.key_windows: dict[str, tuple[int, int, int]] = {}
        self.starts: Counter[int] = Counter()  # aligned period -> jobs claimed in it

    def running(self, now: int) -> list[Job]:
        return [j for j in self.jobs.values() if j.token is not None and j.due > now]

    @staticmethod
    def used(window: tuple[int, int, int] | None, now: int) -> float:
        """The sliding window counter of the ADR: the current period's starts and the
        previous period's, weighted by how much of it the sliding period still covers."""
        start = now // PERIOD_MS * PERIOD_MS
        if window is None:
            return 0.0
        ws, prev, cur = window
        if ws == start:
            return prev * (PERIOD_MS - (now - start)) / PERIOD_MS + cur
        if ws == start - PERIOD_MS:
            return cur * (PERIOD_MS - (now - start)) / PERIOD_MS
        return 0.0

    @staticmethod
    def add(window: tuple[int, int, int] | None, now: int, got: int) -> tuple[int, int, int]:
        start = now // PERIOD_MS * PERIOD_MS
        if window is None:
            return (start, 0, got)
        ws, prev, cur = window
        if ws == start:
            return (start, prev, cur + got)
        if ws == start - PERIOD_MS:
            return (start, cur, got)
        return (start, 0, got)

    def rate_left(self, now: int) -> int | None:
        if self.rate is None:
            return None
        return math.floor(self.rate - self.used(self.window, now))

    def next_claims(self, now: int, n: int) -> list[Job]:
        running = self.running(now)
        take = n
        if self.limit is not None:
            take = min(take, self.limit - len(running))
        left = self.rate_left(now)
        if left is not None:
            take = min(take, left)
        if take <= 0:
            return []
        per_key = Counter(j.key for j in running)
        ready = sorted((j for j in self.jobs.values() if j.due <= now), key=lambda j: (j.due, j.id))
        if self.key_limit is not None or self.key_rate is not None:
            # the claim's candidates: the first `scan` ready jobs of keys not at their
            # limit already (docs/adr/0021, addendum; tests/contract/test_key_limits.py)
            ready = [j for j in ready if j.key is None or not self.at_limit(j.key, per_key, now)]
            ready = ready[: max(n, min(_ordering.KEY_SCAN, 8 * n))]
        picked = []
        ranked: Counter[str | None] = Counter()
        for job in ready:
            if job.key is not None:
                ranked[job.key] += 1  # the job's rank among its key's candidates
                rank = ranked[job.key]
                if self.key_limit is not None and rank + per_key[job.key] > self.key_limit:
                    continue
                used = self.used(self.key_windows.get(job.key), now)
                if self.key_rate is not None and rank > self.key_rate - used:
                    continue
            picked.append(job)
        return picked[:take]

    def at_limit(self, key: str, per_key: Counter[str | None], now: int) -> bool:
        if self.key_limit is not None and per_key[key] >= self.key_limit:
            return True
        used = self.used(self.key_windows.get(key), now)
        return self.key_rate is not None and used > self.key_rate - 1

    def counted(self, now: int, jobs: list[Job]) -> None:
        if self.rate is not None and jobs:
            self.window = self.add(self.window, now, len(jobs))
        if self.key_rate is not None:
            for key, got in Counter(j.key for j in jobs if j.key is not None).items():
                self.key_windows[key] = self.add(self.key_windows.get(key), now, got)
            start = now // PERIOD_MS * PERIOD_MS
            self.key_windows = {
                k: w for k, w in self.key_windows.items() if w[0] >= start - PERIOD_MS
            }


def machine_for(backend: Backend, directory: Path) -> type[RuleBasedStateMachine]:
    class LimitsMachine(StoreMachine):
        def __init__(self) -> None:
            super().__init__(backend, directory, "l")
            self.model = Model()
            self.handles: list[alkstore.Job[Any]] = []

        def set_up(self, store: alkstore.Store) -> None:
            self.queue = store.queue(QUEUE)
            self.queue._rt.exhausted_checked[QUEUE] = float("inf")  # no burying here
            self.queue.configure(max_attempts=1_000, visibility=VISIBILITY_MS / 1000)

        @initialize(limit=bounds, key_limit=bounds, rate=rates, key_rate=rates)
        def first_limits(
            self, limit: int | None, key_limit: int | None, rate: int | None, key_rate: int | None
        ) -> None:
            self.set_limits(limit, key_limit, rate, key_rate)

        @rule(limit=bounds, key_limit=bounds, rate=rates, key_rate=rates)
        def set_limits(
            self, limit: int | None, key_limit: int | None, rate: int | None, key_rate: int | None
        ) -> None:
            self.queue.configure(
                concurrency=limit or 0,
                key_concurrency=key_limit or 0,
                rate_limit=rate or 0,
                key_rate_limit=key_rate or 0,
                rate_period=PERIOD_MS / 1000,
            )
            self.model.key_rate = key_rate
            if rate != self.model.rate:
                self.model.starts.clear()  # the bound holds from the new rate on
            self.model.limit, self.model.key_limit, self.model.rate = limit, key_limit, rate

        @initialize(keys=st.lists(st.sampled_from([*KEYS, None]), min_size=3, max_size=8))
        def fill(self, keys: list[str | None]) -> None:
            """Start with jobs ready, so that the first claims meet the limits."""
            self.enqueue(keys)

        @rule(keys=st.lists(st.sampled_from([*KEYS, None]), min_size=1, max_size=6))
        def enqueue(self, keys: list[str | None]) -> None:
            for key in keys:
                job_id = self.queue.enqueue(0, group=key) if key else self.queue.enqueue(0)
                self.model.jobs[job_id] = Job(job_id, key, self.now)

        @rule(n=st.integers(1, 6), start=st.integers(0, 6))
        def claim(self, n: int, start: int) -> None:
            start = min(start, n)
            expected = self.model.next_claims(self.now, n)
            jobs = self.queue.claim_many(n, start=start)
            # started and prefetched ones are two statements (claim_many): the second
            # counts the first's leases and starts, so they add up to the model's pass
            assert sorted(j.id for j in jobs) == sorted(j.id for j in expected)
            for job in jobs:
                model_job = self.model.jobs[job.id]
                model_job.token = job.lease_token
                model_job.due = self.now + VISIBILITY_MS
                self.handles.append(job)
            self.model.counted(self.now, [self.model.jobs[j.id] for j in jobs])
            self.model.starts[self.now // PERIOD_MS] += len(jobs)
            if jobs:  # what a claim may never do: lease past a limit
                running = self.model.running(self.now)
                if self.model.limit is not None:
                    assert len(running) <= self.model.limit
                if self.model.key_limit is not None:  # the claimed jobs' keys
                    per_key = Counter(j.key for j in running if j.key is not None)
                    claimed = {job.key for job in jobs if job.key is not None}
                    assert all(per_key[key] <= self.model.key_limit for key in claimed)
                if self.model.rate is not None:
                    assert self.model.starts[self.now // PERIOD_MS] <= self.model.rate

        @precondition(lambda self: self.handles)
        @rule(index=st.integers(0, 50), retry=st.booleans())
        def finish(self, index: int, retry: bool) -> None:
            handle = self.handles[index % len(self.handles)]
            job = self.model.jobs.get(handle.id)
            held = job is not None and job.token == handle.lease_token
            if not held:
                with pytest.raises(alkstore.LeaseLost):
                    handle.ack()
                return
            assert job is not None
            if retry:
                handle.retry(delay=0.25, error="again")
                job.token, job.due = None, self.now + 250
            else:
                handle.ack()
                del self.model.jobs[job.id]

        @rule(ms=st.sampled_from([100, 400, 1_000, 2_500]))
        def tick(self, ms: int) -> None:
            self.now += ms

    return LimitsMachine


@pytest.mark.timeout(600)
def test_limits_match_the_model(backend: Backend, tmp_path: Path) -> None:
    run_state_machine_as_test(
        machine_for(backend, tmp_path),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
