"""Concurrent sequencers on PostgreSQL: positions stay dense and appear in order.

Every reader sequences before it reads (`sequence_events`, docs/adr/0004), so with
several readers several sequencers run at once. What keeps them from numbering the
same rows twice, or numbering from a stale head, is the advisory lock that
`sequence_events` takes: without it two sequencers start from the same head,
positions collide or leave holes, and a reader can see position k+1 before k.

Writers append while readers (`log.read`) and pollers (`log.head`, which also
sequences) run on their own pooled connections. Each reader keeps only a position
checkpoint, as the relay does, and checks every page it reads: it must start right
after its checkpoint and be dense. At the end, positions are 1..N, each event once,
and every reader saw the same event at the same position.

With the lock taken out of `sequence_events`, this fails on every run (a sequencer
hits the unique index on positions); with the index made non-unique as well, the
readers' own checks fail (a page of positions [1, 1, 2, 2, 3], or a repeated one).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

import alkstore
from tests.conftest import Backend
from tests.events import Written

WRITERS = 6  # threads
TRANSACTIONS = 120  # per writer
PER_TRANSACTION = (1, 3)  # events in one transaction, inclusive
READERS = 4  # threads calling log.read
POLLERS = 2  # threads calling log.head
DEADLINE = 90.0  # seconds the whole run may take before the test fails

EventId = tuple[int, int]  # (writer, seq)


@pytest.fixture
def pg_store(pg_backend: Backend) -> Iterator[alkstore.Store]:
    with pg_backend.migrated(pool_size=WRITERS + READERS + POLLERS + 2) as store:
        yield store


class Reader:
    """A thread that tails the log by position and checks what each page shows."""

    def __init__(self, store: alkstore.Store, total: int, seed: int) -> None:
        self.store = store
        self.total = total
        self.rand = random.Random(seed)
        self.seen: dict[int, EventId] = {}
        self.problems: list[str] = []

    def run(self, writers_done: threading.Event) -> None:
        after = 0
        deadline = time.monotonic() + DEADLINE
        try:
            while after < self.total and time.monotonic() < deadline:
                page = self.store.log.read(after, self.rand.randint(1, 40))
                positions = [entry.position for entry in page]
                if positions != list(range(after + 1, after + 1 + len(page))):
                    self.problems.append(f"after {after} read positions {positions[:5]}...")
                    return
                for entry in page:
                    payload = entry.payload
                    assert isinstance(payload, Written)
                    self.seen[entry.position] = (payload.writer, payload.seq)
                if page:
                    after = page[-1].position
                elif writers_done.is_set() and self.store.log.head() == after:
                    break
        except alkstore.AlkstoreError as exc:
            self.problems.append(f"after {after}: {exc!r}")


def test_concurrent_readers_sequence_a_dense_log_in_order(pg_store: alkstore.Store) -> None:
    rand = random.Random(20261202)
    plans = [[rand.randint(*PER_TRANSACTION) for _ in range(TRANSACTIONS)] for _ in range(WRITERS)]
    total = sum(map(sum, plans))
    writers_done = threading.Event()
    problems: list[str] = []

    def write(writer: int) -> None:
        seq = 0
        try:
            for count in plans[writer]:
                with pg_store.transaction() as tx:
                    for _ in range(count):
                        tx.append(Written(writer=writer, seq=seq))
                        seq += 1
        except alkstore.AlkstoreError as exc:
            problems.append(f"writer {writer}: {exc!r}")

    heads: list[list[int]] = [[] for _ in range(POLLERS)]

    def poll(poller: int) -> None:
        deadline = time.monotonic() + DEADLINE
        try:
            while not writers_done.is_set() and time.monotonic() < deadline:
                heads[poller].append(pg_store.log.head())
        except alkstore.AlkstoreError as exc:
            problems.append(f"poller {poller}: {exc!r}")

    readers = [Reader(pg_store, total, seed) for seed in range(READERS)]
    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=poll, args=(p,)) for p in range(POLLERS)]
    threads += [threading.Thread(target=r.run, args=(writers_done,)) for r in readers]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads[:WRITERS]:
        thread.join(DEADLINE)
    writers_done.set()
    for thread in threads[WRITERS:]:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads), "the run did not finish in time"

    assert problems == []
    assert [r.problems for r in readers] == [[]] * READERS
    log = {entry.position: entry for entry in pg_store.log.read(0, total + 1)}
    assert sorted(log) == list(range(1, total + 1)), "positions are 1..N, no holes"
    assert pg_store.log.head() == total
    ids = Counter((e.payload.writer, e.payload.seq) for e in log.values())  # type: ignore[attr-defined]
    assert len(ids) == total and max(ids.values()) == 1, "every event once"
    final = {pos: (e.payload.writer, e.payload.seq) for pos, e in log.items()}  # type: ignore[attr-defined]
    for reader in readers:
        assert reader.seen == final, "every reader saw the same event at each position"
    for seen in heads:
        assert seen == sorted(seen), "the head never moves back"
