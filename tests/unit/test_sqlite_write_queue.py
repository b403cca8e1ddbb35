"""SQLite: a process's store transactions take turns at a process-local lock
(alkstore/sqlite/_write.py, docs/adr/0001, addendum 2026-12-01b).

Threads of one process whose store transactions (`store.transaction()`,
`job.transaction()`) write to one database file take a process-local lock around
BEGIN IMMEDIATE ... COMMIT, so they never poll SQLite's busy handler for each other;
the busy handler is left for other processes and for the runtime's one-statement
transactions (claims, acks, enqueues). These tests hold it to that, and to what must
not change: a waiter still gives up with apsw.BusyError after the same timeouts,
every way out of a transaction lets the next writer in, a nested write on the same
thread fails at once (TransactionOpen) instead of waiting for itself, and a forked
child does not inherit a lock its parent's threads hold.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest
import tenacity

import alkstore
from alkstore.sqlite import _busy, _write

THREADS = 8
WRITES = 150  # per thread


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


@pytest.fixture
def store(url: str) -> Iterator[alkstore.Store]:
    store = alkstore.connect(url)
    store.migrate()
    with store.transaction() as tx:
        tx.connection.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, who TEXT)")
    yield store
    store.close()


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of alkstore's busy handler (a poll of SQLite's write lock)."""
    calls: list[int] = []
    original = _busy.BusyWait.__call__

    def counted(self: _busy.BusyWait, tries: int) -> bool:
        calls.append(tries)
        return original(self, tries)

    monkeypatch.setattr(_busy.BusyWait, "__call__", counted)
    return calls


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """The busy timeout (5 s) and the retry after it (30 s), made 0.2 s and 0.5 s (ask
    for it before `store`: a connection takes its busy timeout when it opens)."""
    timeout, retry = 0.2, 0.5
    defaults = _busy.BusyWait.__init__.__defaults__
    assert defaults is not None
    monkeypatch.setattr(_busy.BusyWait.__init__, "__defaults__", (timeout, *defaults[1:]))
    monkeypatch.setattr(_busy, "BUSY_TIMEOUT", timeout)
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(apsw.BusyError),
        wait=tenacity.wait_random_exponential(multiplier=0.002, max=0.1),
        stop=tenacity.stop_after_delay(retry),
        reraise=True,
    )
    monkeypatch.setattr(_busy, "_busy_retrying", retrying)
    return timeout, retry


def run_threads(target: Callable[[int], None], n: int = THREADS) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a writer never finished"
    assert not errors, errors


def test_writers_in_one_process_never_poll_for_each_other(
    store: alkstore.Store, polls: list[int]
) -> None:
    queue = store.queue("work")

    def write(i: int) -> None:
        for n in range(WRITES):
            with store.transaction() as tx:
                if n % 2:
                    tx.enqueue("work", {"thread": i, "n": n})
                else:
                    tx.connection.execute("INSERT INTO rows (who) VALUES (?)", (f"{i}:{n}",))

    run_threads(write)
    assert polls == [], f"{len(polls)} polls of the busy handler between threads of one process"
    with store.transaction() as tx:
        assert tx.connection.execute("SELECT count(*) FROM rows").fetchall()[0][0] == (
            THREADS * WRITES // 2
        )
    assert queue.stats().ready == THREADS * WRITES // 2


def test_two_stores_on_one_file_share_the_queue(
    store: alkstore.Store, url: str, tmp_path: Path, polls: list[int]
) -> None:
    os.symlink(tmp_path / "queue.db", tmp_path / "alias.db")
    other = alkstore.connect(f"sqlite:///{tmp_path / 'alias.db'}")
    try:
        stores = [store, other]

        def write(i: int) -> None:
            for _ in range(WRITES):
                with stores[i % 2].transaction() as tx:
                    tx.enqueue("work", i)

        run_threads(write)
    finally:
        other.close()
    assert polls == []
    assert store.queue("work").stats().ready == THREADS * WRITES


def test_a_waiter_behind_a_thread_gives_up_like_one_behind_another_process(
    short_timeouts: tuple[float, float], store: alkstore.Store, url: str
) -> None:
    """The same error (apsw's BusyError, as before this queue existed) after about the
    same time, whether the lock is held by a thread of this process or by another
    connection; and the waiter's connection is usable afterwards."""
    timeout, retry = short_timeouts
    raised: dict[str, tuple[type[BaseException], float]] = {}

    def attempt(label: str) -> None:
        start = time.monotonic()
        with pytest.raises(apsw.BusyError) as info, store.transaction() as tx:
            tx.enqueue("work", 1)
        raised[label] = (type(info.value), time.monotonic() - start)

    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction():
            holding.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        attempt("thread")
    finally:
        done.set()
        holder.join(10)

    foreign = apsw.Connection(url.removeprefix("sqlite:///"))
    foreign.execute("BEGIN IMMEDIATE")
    try:
        attempt("process")
    finally:
        foreign.execute("ROLLBACK")
        foreign.close()

    assert raised["thread"][0] is raised["process"][0] is apsw.BusyError
    for label, (_, waited) in raised.items():
        assert timeout + retry * 0.8 <= waited < timeout + retry + 2.0, (label, waited)
    store.queue("work").enqueue(2)  # nothing is left held
    assert store.queue("work").stats().ready == 1


def test_every_way_out_of_a_transaction_lets_the_next_writer_in(
    short_timeouts: tuple[float, float], store: alkstore.Store, url: str
) -> None:
    queue = store.queue("work")

    def next_writer_gets_in() -> None:
        """Another thread writes at once (a leaked lock would make it wait and fail)."""
        took: list[float] = []

        def write(_: int) -> None:
            start = time.monotonic()
            with store.transaction() as tx:
                tx.enqueue("work", "next")
            took.append(time.monotonic() - start)

        run_threads(write, 1)
        assert took[0] < short_timeouts[0], took

    with pytest.raises(RuntimeError), store.transaction():
        raise RuntimeError("the handler failed")  # rolled back
    next_writer_gets_in()

    with store.transaction() as tx:
        tx.connection.execute(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
            "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER"
            " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(alkstore.StorageError), store.transaction() as tx:
        tx.connection.execute("INSERT INTO child VALUES (1, 99)")  # fails at COMMIT
    next_writer_gets_in()

    foreign = apsw.Connection(url.removeprefix("sqlite:///"))
    foreign.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(apsw.BusyError), store.transaction():
            pass  # BEGIN IMMEDIATE itself gives up
    finally:
        foreign.execute("ROLLBACK")
        foreign.close()
    next_writer_gets_in()

    with store.transaction():  # a nested write on the same thread: at once, not a wait
        start = time.monotonic()
        with pytest.raises(alkstore.TransactionOpen):
            queue.enqueue("nested")
        with pytest.raises(alkstore.TransactionOpen):
            store.transaction().__enter__()
        assert time.monotonic() - start < short_timeouts[0]
    next_writer_gets_in()
    assert queue.stats().ready == 4


@pytest.mark.slow
def test_a_writer_beside_busy_threads_waits_milliseconds(store: alkstore.Store) -> None:
    """In-process fairness: four threads write back to back for two seconds; a fifth
    enqueues every 20 ms, by turns in a store transaction and as one statement. None of
    its enqueues waits long."""
    stop = threading.Event()

    def hammer(i: int) -> None:
        while not stop.is_set():
            with store.transaction() as tx:
                tx.connection.execute("INSERT INTO rows (who) VALUES (?)", (str(i),))

    hammers = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for thread in hammers:
        thread.start()
    waits = []
    try:
        probe = store.queue("probe")
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            start = time.perf_counter()
            if len(waits) % 2:
                probe.enqueue(0)  # one statement: polls (the busy handler) beside the turns
            else:
                with store.transaction() as tx:  # takes its turn
                    tx.enqueue("probe", 0)
            waits.append(time.perf_counter() - start)
            time.sleep(0.02)
    finally:
        stop.set()
        for thread in hammers:
            thread.join(30)
    waits.sort()
    assert waits[-1] < 0.5, f"longest {waits[-1]:.3f} s, median {waits[len(waits) // 2]:.4f} s"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_does_not_inherit_a_held_lock(tmp_path: Path) -> None:
    """A thread of the parent holds a file's lock when the process forks: in the child
    it is free (no thread there will ever release it). The lock alone, without SQLite:
    a SQLite connection must not cross a fork anyway (sqlite.org/howtocorrupt.html)."""
    path = str(tmp_path / "forked.db")
    lock = _write.for_file(path)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        lock.acquire()
        held.set()
        done.wait(30)
        lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: its turn at once, well within the busy timeout
            code = 1
            try:
                start = time.monotonic()
                _write.for_file(path).acquire()
                code = 0 if time.monotonic() - start < 1.0 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        done.set()
        holder.join(10)
    assert os.waitstatus_to_exitcode(status) == 0
