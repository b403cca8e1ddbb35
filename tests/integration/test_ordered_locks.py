"""Per-key ordered queues on PostgreSQL: the writers of many keys take the keys' rows
(job_groups) in one order (docs/adr/0021, addendum 2026-12-01).

A relay batch inserts ordered jobs for many keys in one statement while workers ack
the heads of those keys with `ack_many`. Both lock the keys' rows; taken in different
orders (the batch's log order, the delete's order) they deadlock, and PostgreSQL rolls
one back after `deadlock_timeout`. Taken in sorted key order they only wait.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import psycopg

import alkstore
from tests.conftest import Backend
from tests.events import Written

KEYS = 40
SECONDS = 6.0
ACKERS = 3


def is_deadlock(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.DeadlockDetected) or "40P01" in str(exc)


def test_relay_batches_and_ack_many_over_the_same_keys_do_not_deadlock(
    pg_backend: Backend,
) -> None:
    with pg_backend.migrated() as store:
        store.subscribe("ordered", ["test.written"], start="beginning", ordered=True)
        queue = store.queue("ordered")
        stop = threading.Event()
        deadlocks: list[str] = []
        errors: list[BaseException] = []
        claimed: dict[str, list[int]] = defaultdict(list)
        seq = 0

        def feed() -> None:  # each batch: every key once, in a new random log order
            nonlocal seq
            rng = random.Random(1)
            try:
                while not stop.is_set():
                    keys = [f"k{n}" for n in range(KEYS)]
                    rng.shuffle(keys)
                    with store.transaction() as tx:
                        for key in keys:
                            tx.append(Written(writer=0, seq=seq), key=key)
                    seq += 1
                    try:
                        store.relay_batch(None)
                    except alkstore.DatabaseBusy as exc:
                        if is_deadlock(exc):
                            deadlocks.append(f"relay: {exc}")
                    # keep the backlog short, so that most batches meet live heads
                    while queue.stats().ready > 4 * KEYS and not stop.is_set():
                        time.sleep(0.001)
            except BaseException as exc:
                errors.append(exc)

        def ack(n: int) -> None:  # the heads of many keys, acked in a random order
            rng = random.Random(100 + n)
            try:
                while not stop.is_set():
                    jobs = queue.claim_many(KEYS)
                    if not jobs:
                        time.sleep(0.001)
                        continue
                    for job in jobs:  # before the ack: a key's next claim comes after it
                        claimed[job.key or ""].append(job.raw_payload["seq"])
                    rng.shuffle(jobs)
                    try:
                        queue.ack_many(jobs)
                    except alkstore.DatabaseBusy as exc:
                        if is_deadlock(exc):
                            deadlocks.append(f"ack_many: {exc}")
                        continue  # the leases lapse; the jobs come back in their order
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=feed)]
        threads += [threading.Thread(target=ack, args=(n,)) for n in range(ACKERS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline and not deadlocks and not errors:
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert deadlocks == []
        assert sum(map(len, claimed.values())) > 10 * KEYS, "too little traffic to tell"
        for key, seqs in claimed.items():  # each key's jobs were claimed in their order
            assert seqs == sorted(seqs), key
