"""Several relays, one active: failover within the lease's bound, and fencing of a stale leader.

Three relay subprocesses run at once with a 1 s lease while writers append; only
the lease holder relays. The active one (found through the lease's holder
`host:pid:random`) is killed with SIGKILL, and a probe event committed right
after the kill must become a job within FAILOVER_BOUND: the lease runs out
within the ttl, a standby campaigns every ttl/3 and relays at once. At the end
every committed event is exactly one job per matching queue.

Fencing, in-process with an injected clock: a leader paused past its ttl whose
lease was taken over cannot relay (NotLeader) and writes nothing.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.faults import relay_support as rs

LEASE_TTL = 1.0
FAILOVER_BOUND = 6.0  # seconds from the kill to the probe's job: 3 x ttl + slack
RELAYS = 3
ROUNDS = 5
WRITERS = 2
LEADER_WAIT = 20.0
PROBE_WAIT = 30.0  # the first probe (all relays still starting) may take a while


def fleet_state(relays: rs.Fleet) -> str:
    """Every relay this test started, with the tail of its log (for failure messages)."""
    return "\n".join(r.describe() for r in relays.all)


def leader(store: alkstore.Store, relays: rs.Fleet) -> tuple[rs.RelayProcess, int]:
    """The live relay holding an unexpired lease, and its token."""
    deadline = time.monotonic() + LEADER_WAIT
    while True:
        held = rs.holder_pid(store, LEASE_TTL)
        if held is not None:
            pid, token = held
            relay = relays.by_pid(pid)
            assert relay is not None, (
                f"the lease is held by pid {pid}, not one of our relays\n{fleet_state(relays)}"
            )
            if relay.alive():
                return relay, token
        assert time.monotonic() < deadline, f"no relay holds the lease:\n{fleet_state(relays)}"
        time.sleep(0.02)


def wait_for_probe(
    store: alkstore.Store,
    seq: int,
    timeout: float,
    claimed: list[rs.Delivered],
    relays: rs.Fleet,
) -> None:
    """Claim probe jobs until the one for probe `seq` arrives (all are kept in `claimed`)."""
    queue = store.queue(rs.PROBES)
    deadline = time.monotonic() + timeout
    while True:
        jobs = rs.deliveries(queue.claim_many(100, visibility=600))
        claimed.extend(jobs)
        if any(d.id == (-1, seq) for d in jobs):
            return
        assert time.monotonic() < deadline, (
            f"probe {seq} was not relayed within {timeout} s\n{fleet_state(relays)}"
        )
        time.sleep(0.005)


@pytest.mark.slow
def test_three_relays_fail_over_within_the_bound_and_relay_exactly_once(
    store: alkstore.Store, backend: Backend, rng: random.Random, tmp_path: Path
) -> None:
    rs.subscribe(store, probes=True)
    stop = threading.Event()
    claimed: list[rs.Delivered] = []
    latencies: list[float] = []
    probes: set[rs.EventId] = set()

    with rs.fleet(backend, tmp_path, LEASE_TTL) as relays:
        for _ in range(RELAYS):
            relays.start()
        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="writer") as pool:
            writers: list[Future[rs.WriterResult]] = [
                pool.submit(rs.write_until, store, w, rng.randrange(2**32), stop)
                for w in range(WRITERS)
            ]
            try:
                rs.append_probe(store, 0)
                probes.add((-1, 0))
                wait_for_probe(store, 0, PROBE_WAIT, claimed, relays)
                for n in range(1, ROUNDS + 1):
                    active, token = leader(store, relays)
                    standbys = [r.pid for r in relays.live() if r is not active]
                    assert len(standbys) == RELAYS - 1, (
                        f"round {n}: {len(standbys)} standbys, not {RELAYS - 1}\n"
                        f"{fleet_state(relays)}"
                    )
                    time.sleep(rng.uniform(0, 0.5))  # the leader is relaying a writer's batch

                    active.kill()
                    killed = time.monotonic()
                    rs.append_probe(store, n)
                    probes.add((-1, n))
                    wait_for_probe(store, n, PROBE_WAIT, claimed, relays)
                    latencies.append(time.monotonic() - killed)
                    # checked each round, so a failure shows the relays' logs of that round
                    assert latencies[-1] < FAILOVER_BOUND, (
                        f"round {n}: probe relayed {latencies[-1]:.2f} s after killing pid "
                        f"{active.pid} (bound {FAILOVER_BOUND} s)\n{fleet_state(relays)}"
                    )

                    successor, new_token = leader(store, relays)
                    assert successor.pid in standbys, (
                        f"round {n}: pid {successor.pid} took over, not a standby {standbys}\n"
                        f"{fleet_state(relays)}"
                    )
                    assert new_token > token, (
                        f"round {n}: token {new_token} after {token}: a takeover must hand out "
                        f"a larger token\n{fleet_state(relays)}"
                    )
                    relays.start()  # three again
            finally:
                stop.set()
            results = [w.result(timeout=60) for w in writers]

        live = relays.live()
        assert len(live) == RELAYS, fleet_state(relays)
        head = rs.wait_caught_up(store, 60, live)
        active_pids = {r.pid for r in relays.all if r.was_active()}
        for relay in live:
            assert relay.terminate() == 0, f"the relay did not stop cleanly:\n{relay.describe()}"

    print(
        f"{backend.name}: kill-to-relayed latencies {[round(x, 2) for x in latencies]} s; "
        f"{len(active_pids)} relays were active at some point"
    )
    assert max(latencies) < FAILOVER_BOUND, latencies

    committed = set().union(probes, *(r.committed for r in results))
    rolled_back = set().union(*(r.rolled_back for r in results))
    queues = [rs.EVERYTHING, rs.CHARGES, rs.PROBES]
    assert rs.check_exactly_once(store, committed, rolled_back, queues, claimed) == head


# -- fencing, in-process --------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def clocked(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


def jobs_and_checkpoints(store: alkstore.Store) -> tuple[int, dict[str, int]]:
    stats = store.queue(rs.EVERYTHING).stats()
    marks = {s.queue: s.checkpoint for s in store.subscriptions()}
    return stats.ready + stats.active + stats.scheduled, marks


def test_a_paused_leader_whose_lease_was_taken_over_cannot_relay(
    clocked: alkstore.Store, clock: Clock
) -> None:
    store = clocked
    rs.subscribe(store)
    with store.transaction() as tx:
        tx.append(rs.Tick(writer=0, seq=0))
        tx.append(rs.Charge(writer=0, seq=1))

    a = store.lease("relay", LEASE_TTL)
    b = store.lease("relay", LEASE_TTL)
    assert a.holder != b.holder
    assert a.acquire()
    token_a = a.token
    assert token_a is not None
    assert not b.acquire() and b.token is None, "acquired a lease another holds"
    clock.advance(0.999)
    assert not b.acquire(), "acquired 1 ms before the lease ran out"

    clock.advance(0.001)  # A is paused past its ttl...
    assert b.acquire()  # ...and B takes over
    assert b.token is not None and b.token > token_a
    info = store.lease("relay", LEASE_TTL).holder_info()
    assert info is not None and info[:2] == (b.holder, b.token)
    lock_row = info

    before = jobs_and_checkpoints(store)
    assert before == (0, {rs.CHARGES: 0, rs.EVERYTHING: 0})
    with pytest.raises(alkstore.NotLeader):
        store.relay_batch(a)  # A wakes up and tries to relay
    assert jobs_and_checkpoints(store) == before, "the fenced leader wrote"
    assert store.lease("relay", LEASE_TTL).holder_info() == lock_row, "it changed the lease"
    assert a.token is None
    assert not a.renew()
    with pytest.raises(alkstore.NotLeader):
        store.relay_batch(a)
    assert not a.acquire(), "A took the lease back while B holds it"

    assert store.relay_batch(b) == (3, 2)
    assert jobs_and_checkpoints(store) == (2, {rs.CHARGES: 2, rs.EVERYTHING: 2})

    # B stops cleanly: A can take over at once, with a larger token again
    token_b = b.token
    b.release()
    assert b.token is None
    assert a.acquire() and a.token is not None and a.token > token_b
    with pytest.raises(alkstore.NotLeader):
        store.relay_batch(b)


def test_an_expired_lease_nobody_took_still_works_for_its_holder(
    clocked: alkstore.Store, clock: Clock
) -> None:
    """Fencing stops a stale leader only once someone else took over."""
    store = clocked
    rs.subscribe(store)
    a = store.lease("relay", LEASE_TTL)
    assert a.acquire()
    token = a.token
    with store.transaction() as tx:
        tx.append(rs.Tick(writer=0, seq=0))
    clock.advance(5)
    assert store.relay_batch(a) == (1, 1)  # renews inside the batch
    assert a.token == token
    assert not store.lease("relay", LEASE_TTL).acquire(), "the renewed lease is held again"


# -- a database blip -----------------------------------------------------------------------


def wait_for_tick(store: alkstore.Store, relay: rs.RelayProcess, timeout: float) -> None:
    queue = store.queue(rs.EVERYTHING)
    deadline = time.monotonic() + timeout
    while queue.claim(visibility=600) is None:
        assert relay.alive(), f"the relay exited:\n{relay.describe()}"
        assert time.monotonic() < deadline, f"nothing relayed in {timeout} s:\n{relay.describe()}"
        time.sleep(0.02)


def test_a_relay_survives_its_database_connections_being_dropped(
    pg_backend: Backend, tmp_path: Path
) -> None:
    app = "alkstore_relay_under_test"
    store = pg_backend.connect()
    try:
        store.migrate()
        rs.subscribe(store)
        with rs.fleet(pg_backend, tmp_path, LEASE_TTL) as relays:
            relay = relays.start(env={"PGAPPNAME": app})
            with store.transaction() as tx:
                tx.append(rs.Tick(writer=0, seq=0))
            wait_for_tick(store, relay, PROBE_WAIT)

            with psycopg.connect(pg_backend.url, autocommit=True) as admin:
                dropped = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (app,),
                ).fetchone()
            assert dropped is not None and dropped[0] >= 1
            time.sleep(0.5)
            with store.transaction() as tx:
                tx.append(rs.Tick(writer=0, seq=1))
            wait_for_tick(store, relay, 15)
            assert relay.terminate() == 0
    finally:
        store.close()
