"""Per-key ordered delivery (docs/adr/0021) against a model, driven by a hypothesis
state machine, for each head-of-line policy ("block", "dead_letter", "park").

Every example gets a fresh namespace and an injected clock. Rules enqueue jobs on a
few keys (some delayed, some through a store transaction, some without a key), claim
one or several, ack, retry (with a delay), fail, let time pass (leases lapse and the
claim takes them again), sweep, and release parked keys (again, or dropping the
head). Stale handles are kept, so every operation is also tried on lost leases.

The model: a key's live jobs in enqueue order; only the first (the head) can be
claimed, when it is due, not leased (or its lease ran out) and has attempts left.
Checked by the rules: each claim hands out exactly the jobs the model predicts, in
claim order (due time, then id); an operation raises LeaseLost exactly when the
model says its lease is lost. Checked after every step: the dead letters, the parked
keys, and that no key ever has two jobs leased at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import alkstore
from tests.conftest import Backend
from tests.machines import StoreMachine

QUEUE = "ordered"
MAX_ATTEMPTS = 2
VISIBILITY_MS = 2_000
BACKOFF_MS = 1_000
KEYS = ["a", "b", "c"]
EXAMPLES = int(os.environ.get("ALKSTORE_ORDERED_EXAMPLES", "30"))
STEPS = int(os.environ.get("ALKSTORE_ORDERED_STEPS", "40"))
quarters = st.integers(0, 8).map(lambda q: q * 250)


@dataclass
class Job:
    id: int
    key: str | None
    due: int  # when it can be claimed once it is its key's head (a lease's end while leased)
    attempts: int = 0
    token: int | None = None
    parked: bool = False


class Model:
    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.jobs: dict[int, Job] = {}
        self.dead: dict[int, str] = {}  # id -> reason

    def head(self, job: Job) -> bool:
        if job.key is None:
            return True
        return job.id == min(j.id for j in self.jobs.values() if j.key == job.key)

    def claimable(self, job: Job, now: int) -> bool:
        return self.head(job) and not job.parked and job.due <= now and job.attempts < MAX_ATTEMPTS

    def next_claims(self, now: int, n: int) -> list[Job]:
        ready = [j for j in self.jobs.values() if self.claimable(j, now)]
        return sorted(ready, key=lambda j: (j.due, j.id))[:n]

    def holds(self, job_id: int, token: int) -> bool:
        job = self.jobs.get(job_id)
        return job is not None and job.token == token

    def give_up(self, job: Job, reason: str) -> None:
        """The head failed for good: parked under "park", else dead-lettered."""
        job.token = None
        if self.policy == "park" and job.key is not None:
            job.parked = True
        else:
            del self.jobs[job.id]
            self.dead[job.id] = reason

    def sweep(self, now: int) -> None:
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            lapsed = job.token is None or job.due <= now
            if job.attempts >= MAX_ATTEMPTS and lapsed and not job.parked:
                reason = "attempts exhausted" if job.token is None else "lease expired"
                self.give_up(job, reason)


def machine_for(backend: Backend, directory: Path, policy: str) -> type[RuleBasedStateMachine]:
    class OrderedMachine(StoreMachine):
        def __init__(self) -> None:
            super().__init__(backend, directory, "o")
            self.model = Model(policy)
            self.handles: list[alkstore.Job[Any]] = []

        def set_up(self, store: alkstore.Store) -> None:
            self.queue = store.queue(QUEUE)
            # claim_many buries exhausted jobs once a (real) second: only the sweep
            # rule may here, so that the model knows when
            self.queue._rt.exhausted_checked[QUEUE] = float("inf")
            self.queue.configure(
                max_attempts=MAX_ATTEMPTS,
                backoff=alkstore.Fixed(BACKOFF_MS / 1000),
                visibility=VISIBILITY_MS / 1000,
                ordered=True,
                on_head_failure=policy,  # type: ignore[arg-type]
            )

        def pick(self, index: int) -> alkstore.Job[Any]:
            live = [h for h in self.handles if self.model.holds(h.id, h.lease_token)]
            pool = live if live and index % 2 == 0 else self.handles
            return pool[(index // 2) % len(pool)]

        def attempt(self, handle: alkstore.Job[Any], operation: str, call: Any) -> bool:
            held = self.model.holds(handle.id, handle.lease_token)
            if held:
                call()
            else:
                with pytest.raises(alkstore.LeaseLost) as lost:
                    call()
                assert (lost.value.job_id, lost.value.operation) == (handle.id, operation)
            return held

        @initialize(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
        def fill(self, keys: list[str]) -> None:
            for key in keys:
                self.enqueue(key, 0, False)

        @rule(
            key=st.sampled_from([*KEYS, None]),
            delay=quarters,
            in_tx=st.booleans(),
        )
        def enqueue(self, key: str | None, delay: int, in_tx: bool) -> None:
            payload = {"key": key}
            options: dict[str, Any] = {"delay": delay / 1000}
            if key is not None:
                options["group"] = key
            if in_tx:
                assert self.store is not None
                with self.store.transaction() as tx:
                    job_id = tx.enqueue(QUEUE, payload, **options)
            else:
                job_id = self.queue.enqueue(payload, **options)
            self.model.jobs[job_id] = Job(job_id, key, self.now + delay)

        @rule(n=st.integers(1, 4))
        def claim(self, n: int) -> None:
            expected = self.model.next_claims(self.now, n)
            jobs = self.queue.claim_many(n)
            assert [j.id for j in jobs] == [j.id for j in expected]
            for job, model_job in zip(jobs, expected, strict=True):
                assert job.key == model_job.key
                model_job.attempts += 1
                model_job.token = job.lease_token
                model_job.due = self.now + VISIBILITY_MS
                assert job.attempt == model_job.attempts
                self.handles.append(job)

        @precondition(lambda self: self.handles)
        @rule(index=st.integers(0, 50))
        def ack(self, index: int) -> None:
            handle = self.pick(index)
            if self.attempt(handle, "ack", handle.ack):
                del self.model.jobs[handle.id]

        @precondition(lambda self: self.handles)
        @rule(index=st.integers(0, 50), delay=quarters)
        def retry(self, index: int, delay: int) -> None:
            handle = self.pick(index)
            # the last attempt, or any failure under "dead_letter", ends the job (as fail)
            ends = handle.attempt >= MAX_ATTEMPTS or (
                handle.key is not None and self.model.policy == "dead_letter"
            )

            def call() -> None:
                handle.retry(delay=delay / 1000, error="boom")

            if self.attempt(handle, "fail" if ends else "retry", call):
                job = self.model.jobs[handle.id]
                if ends:
                    self.model.give_up(job, "boom")
                else:
                    job.token = None
                    job.due = self.now + delay

        @precondition(lambda self: self.handles)
        @rule(index=st.integers(0, 50))
        def fail(self, index: int) -> None:
            handle = self.pick(index)
            if self.attempt(handle, "fail", lambda: handle.fail("gave up")):
                self.model.give_up(self.model.jobs[handle.id], "gave up")

        @rule(ms=st.sampled_from([250, 1_000, 2_500]))
        def tick(self, ms: int) -> None:
            self.now += ms

        @rule()
        def sweep(self) -> None:
            assert self.store is not None
            self.store.sweep()
            self.model.sweep(self.now)

        @rule(key=st.sampled_from(KEYS), drop=st.booleans())
        def unpark(self, key: str, drop: bool) -> None:
            parked = [j for j in self.model.jobs.values() if j.parked and j.key == key]
            got = self.queue.unpark(key, drop=drop, reason="dropped")
            assert got == (parked[0].id if parked else None)
            if parked:
                job = parked[0]
                if drop:
                    del self.model.jobs[job.id]
                    self.model.dead[job.id] = "dropped"
                else:
                    job.parked = False
                    job.attempts = 0
                    job.due = self.now

        @invariant()
        def dead_and_parked_match(self) -> None:
            dead = {d.id: d.reason for d in self.queue.dead_letters(limit=1_000)}
            assert dead == self.model.dead
            parked = {j.key: j.id for j in self.model.jobs.values() if j.parked}
            assert self.queue.parked() == parked

        @invariant()
        def one_lease_per_key(self) -> None:
            leased = [
                j.key
                for j in self.model.jobs.values()
                if j.key is not None and j.token is not None and j.due > self.now
            ]
            assert len(leased) == len(set(leased))

    return OrderedMachine


@pytest.mark.timeout(600)
@pytest.mark.parametrize("policy", ["block", "dead_letter", "park"])
def test_ordered_delivery_matches_the_model(backend: Backend, tmp_path: Path, policy: str) -> None:
    run_state_machine_as_test(
        machine_for(backend, tmp_path, policy),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
