"""Shared by the relay fault tests: relay subprocesses, writer threads, the exactly-once check.

The relay runs as a user runs it (`python -m relay.cli relay ...`), its output in a
log file (never a pipe: a full pipe would block it). Writers are threads of the
test process appending events in their own transactions, about one in seven rolled
back. At the end, every committed event must be exactly one job in each queue whose
subscription matches it, and no rolled-back event may be a job anywhere.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import alkstore
from tests.conftest import Backend
from tests.processes import CliProcess

EVERYTHING = "everything"  # subscribed to "*"
CHARGES = "charges"  # subscribed to a subset: charge events only
PROBES = "probes"  # subscribed to probe events only (failover timing)


class Tick(alkstore.Event, tag="relayfault.tick"):
    writer: int
    seq: int


class Charge(alkstore.Event, tag="relayfault.charge"):
    writer: int
    seq: int


class Probe(alkstore.Event, tag="relayfault.probe"):
    writer: int
    seq: int


EventId = tuple[int, int]  # (writer, seq)
ROUTES: dict[str, Callable[[str], bool]] = {
    EVERYTHING: lambda type_name: True,
    CHARGES: lambda type_name: type_name == "relayfault.charge",
    PROBES: lambda type_name: type_name == "relayfault.probe",
}


def subscribe(store: alkstore.Store, *, probes: bool = False) -> None:
    store.subscribe(EVERYTHING, ["*"], start="beginning")
    store.subscribe(CHARGES, ["relayfault.ch*"], start="beginning")
    if probes:
        store.subscribe(PROBES, ["relayfault.probe"], start="beginning")


# -- relay processes --------------------------------------------------------------------


class RelayProcess(CliProcess):
    """One `alkstore relay` subprocess with its output in a log file."""

    started_marker = "relay starting"

    def __init__(
        self,
        backend: Backend,
        log_path: Path,
        *,
        lease_ttl: float,
        batch: int | None,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        args = ["--db", backend.url, "--namespace", backend.namespace]
        args += ["--lease-ttl", str(lease_ttl)]
        if batch is not None:
            args += ["--batch", str(batch)]
        super().__init__("relay", args + (extra or []), log_path, env)

    def was_active(self) -> bool:
        """The relay logged that it took the lease."""
        return "relay is active" in self.output()


class Fleet:
    """Every relay process a test starts; all killed and reaped when the test ends."""

    def __init__(self, backend: Backend, log_dir: Path, lease_ttl: float = 1.0) -> None:
        self.backend = backend
        self.log_dir = log_dir
        self.lease_ttl = lease_ttl
        self.all: list[RelayProcess] = []

    def start(
        self,
        batch: int | None = None,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> RelayProcess:
        """Start one more relay (`env`: extra environment variables; `extra`: arguments)."""
        path = self.log_dir / f"relay-{len(self.all):03d}.log"
        relay = RelayProcess(
            self.backend, path, lease_ttl=self.lease_ttl, batch=batch, env=env, extra=extra
        )
        self.all.append(relay)
        return relay

    def live(self) -> list[RelayProcess]:
        return [r for r in self.all if r.alive()]

    def by_pid(self, pid: int) -> RelayProcess | None:
        return next((r for r in self.all if r.pid == pid), None)

    def close(self) -> None:
        errors = []
        for relay in self.all:
            try:
                relay.close()
            except Exception as exc:  # reap the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]


@contextmanager
def fleet(backend: Backend, log_dir: Path, lease_ttl: float = 1.0) -> Iterator[Fleet]:
    relays = Fleet(backend, log_dir, lease_ttl)
    try:
        yield relays
    finally:
        relays.close()


def holder_pid(store: alkstore.Store, ttl: float = 1.0) -> tuple[int, int] | None:
    """(pid, token) of the relay lease's holder while its lease runs, else None."""
    info = store.lease("relay", ttl).holder_info()
    if info is None:
        return None
    holder, token, expires_at = info
    if expires_at.timestamp() <= time.time():
        return None
    _host, pid, _random = holder.rsplit(":", 2)
    return int(pid), token


# -- writers -----------------------------------------------------------------------------


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


@dataclass
class WriterResult:
    """What one writer thread committed and rolled back."""

    committed: set[EventId] = field(default_factory=set)
    rolled_back: set[EventId] = field(default_factory=set)


def write_until(
    store: alkstore.Store, writer: int, seed: int, stop: threading.Event, pause: float = 0.02
) -> WriterResult:
    """Append 1-3 events per transaction (ticks and charges) until `stop` is set.

    About one transaction in seven is rolled back by raising inside it; each sleeps
    up to 2 ms after its appends, then the writer waits up to `pause` seconds.
    """
    rand = random.Random(seed)
    out = WriterResult()
    seq = 0
    while not stop.is_set():
        events: list[alkstore.Event] = []
        for _ in range(rand.randint(1, 3)):
            cls = Charge if rand.random() < 0.4 else Tick
            events.append(cls(writer=writer, seq=seq))
            seq += 1
        ids = {(writer, s) for s in range(seq - len(events), seq)}
        try:
            with store.transaction() as tx:
                for event in events:
                    tx.append(event, key=f"w{writer}")
                time.sleep(rand.uniform(0, 0.002))
                if rand.random() < 0.15:
                    raise Rollback
        except Rollback:
            out.rolled_back |= ids
            continue
        out.committed |= ids
        stop.wait(rand.uniform(0, pause))
    return out


def append_probe(store: alkstore.Store, seq: int) -> None:
    with store.transaction() as tx:
        tx.append(Probe(writer=-1, seq=seq))


# -- the final check -----------------------------------------------------------------------


def wait_caught_up(store: alkstore.Store, timeout: float, relays: list[RelayProcess]) -> int:
    """Wait until every subscription's checkpoint is the log head; returns the head."""
    deadline = time.monotonic() + timeout
    while True:
        head = store.log.head()
        marks = {s.queue: s.checkpoint for s in store.subscriptions()}
        if all(mark == head for mark in marks.values()):
            return head
        for relay in relays:
            assert relay.alive(), f"a relay died:\n{relay.describe()}"
        assert time.monotonic() < deadline, (
            f"not caught up after {timeout} s: head {head}, checkpoints {marks}\n"
            + "\n".join(relay.describe() for relay in relays)
        )
        time.sleep(0.1)


def read_log(store: alkstore.Store) -> list[alkstore.LogEntry]:
    entries: list[alkstore.LogEntry] = []
    while batch := store.log.read(after=entries[-1].position if entries else 0, limit=5_000):
        entries.extend(batch)
    return entries


def event_id(payload: Any) -> EventId:
    assert isinstance(payload, Tick | Charge | Probe), payload
    return (payload.writer, payload.seq)


@dataclass(frozen=True)
class Delivered:
    """One job as delivered: (queue, position) and the event it carries."""

    queue: str
    position: int
    type: str
    id: EventId


def deliveries(jobs: list[alkstore.Job[Any]]) -> list[Delivered]:
    return [Delivered(j.queue, j.position, j.type, event_id(j.payload)) for j in jobs]


def claim_everything(store: alkstore.Store, queues: list[str]) -> list[Delivered]:
    out: list[Delivered] = []
    for name in queues:
        queue = store.queue(name)
        while jobs := queue.claim_many(5_000, visibility=600):
            out.extend(deliveries(jobs))
    return out


def check_exactly_once(
    store: alkstore.Store,
    committed: set[EventId],
    rolled_back: set[EventId],
    queues: list[str],
    already_claimed: list[Delivered] | None = None,
) -> int:
    """Every committed event is exactly one job per matching queue; returns the event count."""
    entries = read_log(store)
    logged = [event_id(e.payload) for e in entries]
    assert committed and rolled_back, "expected both commits and rollbacks"
    assert len(set(logged)) == len(logged), "an event is in the log twice"
    assert set(logged) == committed, (
        f"log vs commits: {len(set(logged) - committed)} unexpected, "
        f"{len(committed - set(logged))} missing"
    )
    by_position = {e.position: e for e in entries}

    expected = Counter(
        (queue, e.position) for e in entries for queue in queues if ROUTES[queue](e.type)
    )
    jobs = (already_claimed or []) + claim_everything(store, queues)
    actual = Counter((d.queue, d.position) for d in jobs)
    duplicates = sorted((actual - expected).elements())
    missing = sorted((expected - actual).elements())
    assert not duplicates, f"{len(duplicates)} extra jobs (duplicates): {duplicates[:20]}"
    assert not missing, f"{len(missing)} committed events never became jobs: {missing[:20]}"

    for d in jobs:
        entry = by_position[d.position]
        assert (d.type, d.id) == (entry.type, event_id(entry.payload)), d
    relayed_ids = {d.id for d in jobs}
    assert not relayed_ids & rolled_back, "a rolled-back event became a job"
    for queue in queues:
        assert store.queue(queue).stats().ready == 0
    return len(entries)
