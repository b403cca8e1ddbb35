"""Transactional ack against a model (ADR 0022), driven by a hypothesis state machine.

Rules enqueue, claim (short leases), move the injected clock so leases lapse and other
claims take jobs, retry and release from any handle (stale ones too), force-cancel, and
run `job.transaction()` blocks that write a business row and enqueue a follow-up job, with
failures injected: an exception in the block before or after the write, or a database
error on the ack statement itself. Checked after every step: a business row exists for a
job exactly when its ack committed (the job is gone from the live jobs, acked by the
block), never for a job that is still live; every follow-up job belongs to a committed
block; a block commits exactly when the model says its handle still holds the lease.
"""

from __future__ import annotations

import os
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
from tests.business import Business
from tests.conftest import Backend
from tests.machines import StoreMachine

QUEUE = "txack"
FOLLOW = "follow"
# Measured on 2 cores: 25 x 30 runs in about 3 s (SQLite) and 10 s (PostgreSQL).
EXAMPLES = int(os.environ.get("ALKSTORE_MODEL_EXAMPLES_TXACK", "25"))
STEPS = int(os.environ.get("ALKSTORE_MODEL_STEPS_TXACK", "30"))


class Injected(Exception):
    """A failure the state machine injects."""


def machine_for(backend: Backend, directory: Path) -> type[RuleBasedStateMachine]:
    class TxAckMachine(StoreMachine):
        def __init__(self) -> None:
            super().__init__(backend, directory, "x")
            self.live: dict[int, int | None] = {}  # job id -> the token that holds it
            self.acked: set[int] = set()
            self.handles: list[alkstore.Job[Any]] = []

        def set_up(self, store: alkstore.Store) -> None:
            self.business = Business(store)
            self.queue = store.queue(QUEUE)
            self.queue.configure(max_attempts=1_000)
            engine: Any = store.engine
            real = engine.ack_in
            self.fail_ack = False

            def ack_in(conn: Any, job_id: int, token: int | None) -> Any:
                if self.fail_ack:
                    raise alkstore.StorageError("injected: the ack statement failed")
                return real(conn, job_id, token)

            engine.ack_in = ack_in

        def holds(self, handle: alkstore.Job[Any]) -> bool:
            return bool(self.live.get(handle.id, 0) == handle.lease_token)

        def pick(self, index: int) -> alkstore.Job[Any]:
            live = [h for h in self.handles if self.holds(h)]
            pool = live if live and index % 2 == 0 else self.handles
            return pool[(index // 2) % len(pool)]

        @initialize(count=st.integers(1, 4))
        def fill(self, count: int) -> None:
            self.enqueue(count)

        @rule(count=st.integers(1, 3))
        def enqueue(self, count: int) -> None:
            for job_id in self.queue.enqueue_many([{"n": n} for n in range(count)]):
                assert job_id is not None
                self.live[job_id] = None

        @rule(n=st.integers(1, 3), lease_s=st.integers(1, 3))
        def claim(self, n: int, lease_s: int) -> None:
            for job in self.queue.claim_many(n, visibility=lease_s):
                assert job.id in self.live
                self.live[job.id] = job.lease_token
                self.handles.append(job)

        @rule(ms=st.sampled_from([500, 1_000, 2_500]))
        def advance(self, ms: int) -> None:
            self.now += ms

        @precondition(lambda self: bool(self.handles))
        @rule(index=st.integers(0, 50), release=st.booleans())
        def give_back(self, index: int, release: bool) -> None:
            handle = self.pick(index)
            held = self.holds(handle)
            try:
                handle.release() if release else handle.retry(delay=0)
            except alkstore.LeaseLost:
                assert not held
            else:
                assert held
                self.live[handle.id] = None

        @precondition(lambda self: bool(self.live))
        @rule(index=st.integers(0, 50))
        def cancel(self, index: int) -> None:
            job_id = sorted(self.live)[index % len(self.live)]
            self.queue.cancel(job_id, force=True)
            del self.live[job_id]

        @precondition(lambda self: bool(self.handles))
        @rule(
            index=st.integers(0, 50),
            fault=st.sampled_from([None, None, "before", "after", "ack"]),
        )
        def transaction(self, index: int, fault: str | None) -> None:
            handle = self.pick(index)
            held = self.holds(handle) and not handle.acked
            if handle.acked:
                with pytest.raises(alkstore.LeaseLost):
                    handle.transaction()
                return
            self.fail_ack = fault == "ack"
            try:
                with handle.transaction() as tx:
                    if fault == "before":
                        raise Injected
                    # keyed by the claim's token: a stale holder's row would not clash
                    self.business.write(tx, handle.lease_token, str(handle.id))
                    tx.enqueue(FOLLOW, {"job": handle.id})
                    if fault == "after":
                        raise Injected
            except (Injected, alkstore.StorageError):
                assert fault is not None
                assert not handle.acked
            except alkstore.LeaseLost:
                assert not held, "a holder's block was refused"
                assert not handle.acked and handle.lease_lost
            else:
                assert held and fault is None, "a block committed without the lease"
                assert handle.acked
                del self.live[handle.id]
                self.acked.add(handle.id)
            finally:
                self.fail_ack = False

        @invariant()
        def rows_match_acks(self) -> None:
            by_token = self.business.rows()  # token -> job id
            committed = sorted(int(job) for job in by_token.values())
            assert committed == sorted(self.acked), "one row per ack, never two"
            rows = {int(job) for job in by_token.values()}
            live = {info.id for info in self.queue.jobs(limit=1_000)}
            assert live == set(self.live), "the live jobs are the model's"
            assert not live & set(rows), "a business row for a job still live"
            assert self.store is not None
            follow = [info.raw_payload["job"] for info in self.store.queue(FOLLOW).jobs()]
            assert sorted(follow) == sorted(self.acked), "one follow-up per committed block"

    return TxAckMachine


@pytest.mark.timeout(300)
def test_transactional_ack_matches_the_model(backend: Backend, tmp_path: Path) -> None:
    run_state_machine_as_test(
        machine_for(backend, tmp_path),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
