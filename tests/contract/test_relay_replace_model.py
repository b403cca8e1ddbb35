"""Replace and debounce on the relay's fan-out (docs/adr/0022, addendum 2026-12-01)
against a model, driven by a hypothesis state machine, with `replace_by_key=True` and
with `debounce_by_key=1` (a one-second window).

Every example gets a fresh namespace and an injected clock. Rules append events in
transactions (on a few keys, some without a key), relay in batches of 1 to 6 events,
claim, ack, and let time pass. The model replays the relayed events one at a time in log
order: an event without a key makes a job; one with a key replaces the waiting job that
holds the key (its id kept; the newest event's payload; due now + window, attempts 0),
else a job a worker holds gives the key up and a new job takes it. Checked by the rules:
each relay covers what the model says and writes one job per keyless event and per key
of the batch; each claim hands out the jobs the model says are due. Checked after every
step: the live jobs (id, key, dedupe key, event, leased or not, due time) are the model's,
and no key has two waiting jobs.
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
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.machines import StoreMachine

QUEUE = "latest"
KEYS = ["a", "b", "c"]
EXAMPLES = int(os.environ.get("ALKSTORE_REPLACE_EXAMPLES", "25"))
STEPS = int(os.environ.get("ALKSTORE_REPLACE_STEPS", "40"))


@dataclass
class Job:
    id: int | None  # None until the relay made it (matched by its event)
    key: str | None
    dedupe_key: str | None
    seq: int  # the event's order_id
    due: int
    leased: bool = False


def machine_for(backend: Backend, directory: Path, window_ms: int) -> type[RuleBasedStateMachine]:
    class ReplaceMachine(StoreMachine):
        def __init__(self) -> None:
            super().__init__(backend, directory, "r")
            self.pending: list[tuple[str | None, int]] = []  # appended, not yet relayed
            self.jobs: list[Job] = []
            self.handles: list[alkstore.Job[Any]] = []
            self.seq = 0

        def set_up(self, store: alkstore.Store) -> None:
            options: dict[str, Any] = (
                {"debounce_by_key": window_ms / 1000} if window_ms else {"replace_by_key": True}
            )
            store.subscribe(QUEUE, ["test.*"], start="beginning", **options)
            self.queue = store.queue(QUEUE)

        @rule(keys=st.lists(st.sampled_from([*KEYS, None]), min_size=1, max_size=4))
        def append(self, keys: list[str | None]) -> None:
            assert self.store is not None
            with self.store.transaction() as tx:
                for key in keys:
                    self.seq += 1
                    tx.append(OrderPlaced(order_id=self.seq), key=key)
                    self.pending.append((key, self.seq))

        @rule(batch=st.integers(1, 6))
        def relay(self, batch: int) -> None:
            assert self.store is not None
            events, self.pending = self.pending[:batch], self.pending[batch:]
            for key, seq in events:
                self.replace(key, seq)
            writes = sum(1 for k, _ in events if k is None) + len({k for k, _ in events if k})
            assert self.store.relay_batch(batch=batch) == (writes, len(events))
            known = {job.id for job in self.jobs}
            fresh = {(j.key, j.raw_payload["order_id"]): j.id for j in self.queue.jobs()}
            for job in self.jobs:
                if job.id is None:
                    job.id = fresh[(job.key, job.seq)]
                    assert job.id not in known
                    known.add(job.id)

        def replace(self, key: str | None, seq: int) -> None:
            due = self.now + window_ms
            if key is not None:
                for job in self.jobs:
                    if job.dedupe_key == key and not job.leased:
                        job.seq, job.due = seq, due
                        return
                    if job.dedupe_key == key:
                        job.dedupe_key = None  # held by a worker: it gives the key up
            self.jobs.append(Job(None, key, key, seq, due))

        @rule(n=st.integers(1, 4))
        def claim(self, n: int) -> None:
            ready = sorted(
                (j for j in self.jobs if not j.leased and j.due <= self.now),
                key=lambda j: (j.due, j.id or 0),
            )
            claimed = self.queue.claim_many(n, visibility=3_600)
            assert [j.id for j in claimed] == [j.id for j in ready[:n]]  # in claim order
            by_id = {j.id: j for j in self.jobs}
            for handle in claimed:
                job = by_id[handle.id]
                assert handle.raw_payload["order_id"] == job.seq
                job.leased = True
                self.handles.append(handle)

        @precondition(lambda self: self.handles)
        @rule(index=st.integers(0, 20))
        def ack(self, index: int) -> None:
            handle = self.handles.pop(index % len(self.handles))
            handle.ack()
            self.jobs = [j for j in self.jobs if j.id != handle.id]

        @rule(ms=st.integers(0, 1_500))
        def advance(self, ms: int) -> None:
            self.now += ms

        @invariant()
        def live_jobs_are_the_models(self) -> None:
            got = sorted(
                (
                    j.id,
                    j.key,
                    j.dedupe_key,
                    j.raw_payload["order_id"],
                    j.state == "running",
                    round(j.visible_at.timestamp() * 1000) if j.state != "running" else 0,
                )
                for j in self.queue.jobs()
            )
            want = sorted(
                (j.id, j.key, j.dedupe_key, j.seq, j.leased, 0 if j.leased else j.due)
                for j in self.jobs
            )
            assert got == want
            waiting = [j.dedupe_key for j in self.jobs if j.dedupe_key and not j.leased]
            assert len(waiting) == len(set(waiting))

    return ReplaceMachine


@pytest.mark.parametrize("window_ms", [0, 1_000], ids=["replace", "debounce"])
def test_replace_and_debounce_follow_the_model(
    backend: Backend, tmp_path: Path, window_ms: int
) -> None:
    machine = machine_for(backend, tmp_path, window_ms)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
