"""The relay killed with SIGKILL at random moments: every event still becomes exactly one job.

Writer threads append events (some transactions rolled back) into a log with two
subscriptions, one matching every event, one a subset. Meanwhile the relay runs
as a subprocess and is killed with SIGKILL again and again: sometimes within
milliseconds of its start (still importing, connecting or campaigning), mostly a
random moment after it took the lease (in the middle of relaying, with batches
of varying size). Each batch is one transaction that inserts the jobs and moves
the checkpoints, so a kill at any point either lands the whole batch or none of
it. At the end one relay catches up, and the jobs are compared with the log:
no duplicates, none missing, nothing from a rolled-back transaction.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import alkstore
from tests.conftest import Backend
from tests.faults import relay_support as rs

KILLS = 30
EARLY_KILL_RATE = 0.3  # this share of kills lands 0-30 ms after the relay's start
ACTIVE_WAIT = 20.0  # seconds a restarted relay may take to become active (busy machine)
MAX_AFTER_ACTIVE = 0.5  # seconds: the other kills land up to this long after the takeover
WRITERS = 2
CATCH_UP = 60.0


@pytest.mark.slow
def test_relay_killed_at_random_moments_relays_every_event_exactly_once(
    store: alkstore.Store, backend: Backend, rng: random.Random, tmp_path: Path
) -> None:
    rs.subscribe(store)
    stop = threading.Event()
    started = time.monotonic()
    early_kills = active_kills = 0
    relayed_before_final = 0

    with rs.fleet(backend, tmp_path) as relays:
        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="writer") as pool:
            writers: list[Future[rs.WriterResult]] = [
                pool.submit(rs.write_until, store, w, rng.randrange(2**32), stop)
                for w in range(WRITERS)
            ]
            try:
                for _ in range(KILLS):
                    batch = rng.choice([None, None, 10, 200])
                    relay = relays.start(batch=batch)
                    if rng.random() < EARLY_KILL_RATE:
                        time.sleep(rng.uniform(0, 0.03))
                        early_kills += 1
                    else:
                        deadline = time.monotonic() + ACTIVE_WAIT
                        while not relay.was_active():
                            assert relay.alive(), f"the relay exited:\n{relay.describe()}"
                            assert time.monotonic() < deadline, (
                                f"the relay did not take the lease in {ACTIVE_WAIT} s:\n"
                                f"{relay.describe()}"
                            )
                            time.sleep(0.01)
                        time.sleep(rng.uniform(0, MAX_AFTER_ACTIVE))
                        active_kills += 1
                    assert relay.alive(), f"the relay exited before the kill:\n{relay.describe()}"
                    relay.kill()
                    assert relay.proc.returncode == -signal.SIGKILL
                    for w in writers:
                        if w.done():
                            w.result()  # raises what stopped it
                            raise AssertionError("a writer stopped early")
            finally:
                stop.set()
            results = [w.result(timeout=60) for w in writers]
        kill_phase = time.monotonic() - started

        relayed_before_final = min(s.checkpoint for s in store.subscriptions())
        final = relays.start()
        head = rs.wait_caught_up(store, CATCH_UP, [final])
        assert final.terminate() == 0, f"the relay did not stop cleanly:\n{final.describe()}"

    committed = set().union(*(r.committed for r in results))
    rolled_back = set().union(*(r.rolled_back for r in results))
    events = rs.check_exactly_once(store, committed, rolled_back, [rs.EVERYTHING, rs.CHARGES])
    assert events == head
    assert relayed_before_final > 0, "the killed relays never relayed anything"
    print(
        f"{backend.name}: {KILLS} kills ({early_kills} early, {active_kills} while active) in "
        f"{kill_phase:.1f} s; {events} events committed, {len(rolled_back)} rolled back; "
        f"{relayed_before_final} relayed before the final relay; "
        f"total {time.monotonic() - started:.1f} s"
    )
