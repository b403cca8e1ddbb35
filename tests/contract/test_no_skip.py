"""No skipped events: a reader tailing the log sees every commit exactly once, in log order.

The hazard on PostgreSQL: a transaction that appends first can commit last. If its
event got its position at insert time, a reader that has already moved past a later
position would never read it. alkstore numbers events after they commit (on SQLite
the single writer makes insert order commit order), and these tests drive
concurrent writers, rollbacks and a deliberately inverted commit order against a
reader that keeps only a position checkpoint.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from itertools import pairwise
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as ProcessEvent
from multiprocessing.synchronize import Semaphore as ProcessSemaphore
from pathlib import Path

import alkstore
from tests.conftest import Backend
from tests.events import Written

WRITERS = 8  # threads
PROCESSES = 4
PER_WRITER = 1_000  # transactions per writer, one event each
ROLLBACK_RATE = 0.1
MAX_DELAY = 0.002  # seconds, slept inside the transaction after the append
READ_LIMIT = 500
WAKE_TIMEOUT = 0.1  # the reader's re-poll safety net between empty reads
DEADLINE = 90.0  # seconds a whole tailing run may take before the test fails

EventId = tuple[int, int]  # (writer, seq)


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def write_events(store: alkstore.Store, writer: int, seed: int, count: int) -> list[int]:
    """Append `count` events, one per transaction; return the seqs that committed.

    Each transaction sleeps 0-2 ms after its append (so commits overlap and finish
    out of insert order), and about one in ten is rolled back by raising inside it.
    """
    rand = random.Random(seed)
    committed = []
    for seq in range(count):
        delay = rand.uniform(0, MAX_DELAY)
        roll_back = rand.random() < ROLLBACK_RATE
        try:
            with store.transaction() as tx:
                tx.append(Written(writer=writer, seq=seq))
                time.sleep(delay)
                if roll_back:
                    raise Rollback
        except Rollback:
            continue
        committed.append(seq)
    return committed


def event_id(entry: alkstore.LogEntry) -> EventId:
    event = entry.payload
    assert isinstance(event, Written), entry
    return (event.writer, event.seq)


class Tail:
    """What a tailing reader saw, and whether it saw some of it while writers ran."""

    def __init__(self) -> None:
        self.entries: list[alkstore.LogEntry] = []
        self.read_while_writing = 0


def tail(store: alkstore.Store, writers_done: Callable[[], bool]) -> Tail:
    """Follow the log from 0 with a position checkpoint until the writers are done.

    `writers_done` is checked before each read, so once it is true, an empty read
    means every committed event has been read; the head check confirms it.
    """
    seen = Tail()
    listener = store.listen()
    after = 0
    deadline = time.monotonic() + DEADLINE
    while True:
        finished = writers_done()
        entries = store.log.read(after=after, limit=READ_LIMIT)
        if entries:
            seen.entries.extend(entries)
            after = entries[-1].position
            if not finished:
                seen.read_while_writing += len(entries)
            continue
        if finished and after >= store.log.head():
            return seen
        assert time.monotonic() < deadline, f"reader stuck at position {after}"
        listener.wait(WAKE_TIMEOUT)


def check_tail(seen: Tail, committed: set[EventId], attempted: int) -> None:
    """Every committed event exactly once, nothing rolled back, positions increasing."""
    positions = [e.position for e in seen.entries]
    ids = [event_id(e) for e in seen.entries]
    assert 0 < len(committed) < attempted, "expected both commits and rollbacks"
    assert seen.read_while_writing > 0, "the reader never read while writers were running"

    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not duplicates, f"read more than once: {duplicates[:20]}"
    missing = sorted(committed - set(ids))
    assert not missing, f"{len(missing)} committed events never read: {missing[:20]}"
    rolled_back = sorted(set(ids) - committed)
    assert not rolled_back, f"read events that were rolled back: {rolled_back[:20]}"

    bad = [(a, b) for a, b in pairwise(positions) if a >= b]
    assert not bad, f"positions not strictly increasing: {bad[:20]}"
    assert len(set(positions)) == len(positions)

    # Each writer commits one transaction after another, so its events must appear
    # in the log in its own commit order.
    by_writer: dict[int, list[int]] = {}
    for writer, seq in ids:
        by_writer.setdefault(writer, []).append(seq)
    for writer, seqs in by_writer.items():
        assert seqs == sorted(seqs), f"writer {writer}'s events are out of commit order"


def test_concurrent_writers_reader_sees_every_commit_once(
    store: alkstore.Store, rng: random.Random
) -> None:
    seeds = [rng.randrange(2**32) for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS)

    def writer(w: int) -> list[int]:
        start.wait(timeout=30)
        return write_events(store, w, seeds[w], PER_WRITER)

    with ThreadPoolExecutor(max_workers=WRITERS + 1, thread_name_prefix="no-skip") as pool:
        writers: list[Future[list[int]]] = [pool.submit(writer, w) for w in range(WRITERS)]
        reader = pool.submit(tail, store, lambda: all(f.done() for f in writers))
        seen = reader.result()
        committed = {(w, seq) for w, f in enumerate(writers) for seq in f.result()}

    check_tail(seen, committed, WRITERS * PER_WRITER)


def _write_in_process(
    url: str,
    namespace: str,
    writer: int,
    seed: int,
    result_path: str,
    ready: ProcessSemaphore,
    go: ProcessEvent,
) -> None:
    """A writer process (spawned): its own store, then the committed seqs as JSON."""
    import alkstore
    import tests.events  # noqa: F401 - the event types this process appends

    store = alkstore.connect(url, namespace=namespace)
    try:
        ready.release()
        if not go.wait(timeout=60):
            raise TimeoutError("the parent never said go")
        committed = write_events(store, writer, seed, PER_WRITER)
    finally:
        store.close()
    tmp = f"{result_path}.tmp"
    with open(tmp, "w") as f:
        json.dump(committed, f)
    os.replace(tmp, result_path)


def test_concurrent_writer_processes_reader_sees_every_commit_once(
    store: alkstore.Store, backend: Backend, rng: random.Random, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    results = [tmp_path / f"writer-{w}.json" for w in range(PROCESSES)]
    procs: list[BaseProcess] = [
        ctx.Process(
            target=_write_in_process,
            args=(
                backend.url,
                backend.namespace,
                w,
                rng.randrange(2**32),
                str(results[w]),
                ready,
                go,
            ),
            name=f"no-skip-writer-{w}",
        )
        for w in range(PROCESSES)
    ]
    try:
        for p in procs:
            p.start()
        started = 0
        deadline = time.monotonic() + 60
        while started < PROCESSES:
            if ready.acquire(timeout=0.5):
                started += 1
                continue
            dead = [p.name for p in procs if p.exitcode is not None]
            assert not dead, f"writer processes exited before starting: {dead}"
            assert time.monotonic() < deadline, "writer processes did not start"
        go.set()
        seen = tail(store, lambda: all(p.exitcode is not None for p in procs))
        for p in procs:
            p.join()
        assert [p.exitcode for p in procs] == [0] * PROCESSES
    finally:
        go.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
            if p.pid is not None:
                p.join()
            p.close()

    committed = {(w, seq) for w, path in enumerate(results) for seq in json.loads(path.read_text())}
    check_tail(seen, committed, PROCESSES * PER_WRITER)


def test_first_appender_commits_last(store: alkstore.Store, backend: Backend) -> None:
    """A appends first and stays open; B appends second; A commits last (where it can).

    PostgreSQL: B commits while A is open, so B's event must get the lower position,
    and a reader already past B's position must still read A's event afterwards.
    SQLite: one writer at a time, so B waits for A; the log is then A, B.
    """
    event_a = Written(writer=1, seq=0)
    event_b = Written(writer=2, seq=0)
    a_appended = threading.Event()
    a_may_commit = threading.Event()
    b_appended = threading.Event()

    def run_a() -> None:
        with store.transaction() as tx:
            tx.append(event_a)
            a_appended.set()
            if not a_may_commit.wait(timeout=30):
                raise TimeoutError("A was never allowed to commit")

    def run_b() -> None:
        with store.transaction() as tx:
            tx.append(event_b)
            b_appended.set()

    reads: list[list[alkstore.LogEntry]] = []
    after = 0

    def read() -> list[EventId]:
        nonlocal after
        entries = store.log.read(after=after, limit=100)
        reads.append(entries)
        if entries:
            after = entries[-1].position
        return [event_id(e) for e in entries]

    id_a, id_b = (1, 0), (2, 0)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="first-last") as pool:
        a = pool.submit(run_a)
        try:
            assert a_appended.wait(timeout=10), "A did not append"
            assert read() == [], "A's event is visible before A committed"

            b = pool.submit(run_b)
            # PostgreSQL must let B commit now (wait generously, a busy machine is
            # slow); SQLite must keep B blocked: 200 ms of it is evidence enough.
            with suppress(TimeoutError):
                b.result(timeout=10 if backend.name == "postgres" else 0.2)
            b_committed_while_a_open = b.done()
            b_appended_while_a_open = b_appended.is_set()
            assert not a.done()
            if backend.name == "postgres":
                # Appenders never wait for each other: B commits while A is open.
                assert b_committed_while_a_open, "B was blocked by A's open transaction"
                assert read() == [id_b]
                checkpoint = after
            else:
                # The single writer: B cannot even begin writing until A ends.
                assert not b_appended_while_a_open, "B wrote while A held the write lock"
                assert read() == []
                checkpoint = 0
        finally:
            a_may_commit.set()
        a.result(timeout=10)
        after_a_commit = read()
        b.result(timeout=30)
    rest = read()

    # What the handshakes observed, in commit order.
    commit_order = [id_b, id_a] if b_committed_while_a_open else [id_a, id_b]
    entries = [e for batch in reads for e in batch]
    assert [event_id(e) for e in entries] == commit_order, "each event once, in commit order"
    positions = [e.position for e in entries]
    assert positions == sorted(set(positions))
    assert after_a_commit[:1] == [id_a]
    if backend.name == "postgres":
        position_a = entries[1].position
        assert position_a > checkpoint, "A's event landed behind a reader's checkpoint"
        assert after_a_commit == [id_a] and rest == []
    else:
        assert after_a_commit + rest == [id_a, id_b]
    assert store.log.head() == positions[-1]
