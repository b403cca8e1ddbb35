"""SQLite store transactions committed in groups (alkstore/sqlite/_group.py, ADR 0028).

Groups are made on purpose here: one thread holds the turn inside its transaction until
the others wait for it (`Committer._waiting`), so the first one hands the open SQLite
transaction on when it ends."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

import alkstore
from alkstore.sqlite import _busy, _group
from alkstore.sqlite._engine import SqliteEngine

SCHEMA = """
CREATE TABLE rows (name TEXT PRIMARY KEY);
CREATE TABLE parents (id INTEGER PRIMARY KEY);
CREATE TABLE children (
    id INTEGER PRIMARY KEY,
    parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED
);
"""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[alkstore.Store]:
    monkeypatch.setattr(_group, "GROUP_AGE", 30.0)  # a slow machine keeps its groups
    store = alkstore.connect(f"sqlite:///{tmp_path / 'group.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.connection.execute(SCHEMA)
    yield store
    store.close()


def committer(store: alkstore.Store) -> _group.Committer:
    engine = store._runtime.engine
    assert isinstance(engine, SqliteEngine)
    return engine.committer


def committed(store: alkstore.Store) -> set[str]:
    """The rows another connection sees: committed ones only."""
    path = store._runtime.engine._path  # type: ignore[attr-defined]
    conn = apsw.Connection(path)
    try:
        return {name for (name,) in conn.execute("SELECT name FROM rows")}
    finally:
        conn.close()


def insert(tx: alkstore.Transaction, name: str) -> None:
    tx.connection.execute("INSERT INTO rows (name) VALUES (?)", (name,))


class Commits:
    """Counts the group commits and their sizes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = _group.Committer._commit

        def counted(committer: _group.Committer, group: _group._Group) -> None:
            self.sizes.append(group.members)
            real(committer, group)

        monkeypatch.setattr(_group.Committer, "_commit", counted)


after_first: set[str] = set()  # what was committed when the first member's `with` returned


def in_a_group(
    store: alkstore.Store, first: Callable[[], None], others: list[Callable[[], None]]
) -> list[BaseException | None]:
    """Run `first` in a thread that holds the turn until every one of `others` (each in
    a thread of its own) waits for it; returns each one's exception (first's first)."""
    results: list[BaseException | None] = [None] * (1 + len(others))
    after_first.clear()
    entered = threading.Event()
    waiting = committer(store)._waiting

    def run(index: int, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # reported to the test
            results[index] = exc

    def leader() -> None:
        def hold() -> None:
            with store.transaction() as tx:
                insert(tx, "first")
                entered.set()
                deadline = time.monotonic() + 5
                while len(waiting) < len(others) and time.monotonic() < deadline:
                    time.sleep(0.001)
                assert len(waiting) == len(others), "the others did not wait for the turn"
                first()
            after_first.update(committed(store))

        run(0, hold)

    threads = [threading.Thread(target=leader)]
    threads[0].start()
    assert entered.wait(5)
    for index, fn in enumerate(others, 1):
        threads.append(threading.Thread(target=run, args=(index, fn)))
        threads[-1].start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    return results


def member(store: alkstore.Store, name: str, fail: bool = False) -> Callable[[], None]:
    def fn() -> None:
        with store.transaction() as tx:
            insert(tx, name)
            if fail:
                raise RuntimeError(f"{name} fails")

    return fn


def test_one_commit_for_the_group_and_a_failing_member_loses_only_its_writes(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = Commits(monkeypatch)
    results = in_a_group(store, lambda: None, [member(store, "b", fail=True), member(store, "c")])
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], RuntimeError)  # the block's own exception, unchanged
    assert committed(store) == {"first", "c"}
    assert commits.sizes == [2], "the two members that kept their writes committed once"


def test_a_failing_first_member_leaves_the_next_one_a_fresh_transaction(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = Commits(monkeypatch)

    def fail() -> None:
        raise RuntimeError("first fails")

    results = in_a_group(store, fail, [member(store, "b"), member(store, "c")])
    assert isinstance(results[0], RuntimeError) and results[1:] == [None, None]
    assert committed(store) == {"b", "c"}
    assert commits.sizes == [2]


def test_a_group_older_than_group_age_commits_at_its_next_members_end(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group, "GROUP_AGE", 0.0)
    commits = Commits(monkeypatch)
    results = in_a_group(store, lambda: None, [member(store, "b")])
    assert results == [None, None]
    assert commits.sizes == [1, 1]
    assert committed(store) == {"first", "b"}


def test_a_member_returns_only_once_its_writes_are_committed(store: alkstore.Store) -> None:
    """The first member ends before the second, but its `with` returns after the second's
    block (the group's commit): a returned transaction is a committed one."""
    events: list[str] = []

    def second() -> None:
        with store.transaction() as tx:
            insert(tx, "second")
            time.sleep(0.2)
            events.append("second's block ended")

    def first_returned() -> None:
        events.append("first's block ended")

    results = in_a_group(store, first_returned, [second])
    assert results == [None, None]
    assert events == ["first's block ended", "second's block ended"]
    assert after_first == {"first", "second"}
    assert committed(store) == {"first", "second"}


def test_members_see_the_writes_of_the_members_before_them(store: alkstore.Store) -> None:
    seen: list[set[str]] = []

    def reader() -> None:
        with store.transaction() as tx:
            seen.append({name for (name,) in tx.connection.execute("SELECT name FROM rows")})

    assert in_a_group(store, lambda: None, [reader]) == [None, None]
    assert seen == [{"first"}]


def test_a_commit_that_fails_fails_every_member_and_keeps_nothing(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _busy.execute
    failed: list[str] = []

    def failing(conn: apsw.Connection, statement: str) -> None:
        if statement == "COMMIT" and not failed:
            failed.append(statement)
            raise apsw.IOError("disk I/O error (injected)")
        real(conn, statement)

    monkeypatch.setattr(_busy, "execute", failing)
    results = in_a_group(store, lambda: None, [member(store, "b")])
    assert failed == ["COMMIT"]
    for result in results:
        assert isinstance(result, alkstore.StorageError)
        assert "disk I/O error (injected)" in str(result)
    assert results[0] is not results[1]  # each member raises an exception of its own
    assert committed(store) == set()
    member(store, "after")()  # and the next transactions work
    assert committed(store) == {"after"}


def test_a_deferred_foreign_key_fails_only_the_member_that_broke_it(
    store: alkstore.Store,
) -> None:
    def orphan() -> None:
        with store.transaction() as tx:
            insert(tx, "orphan")
            tx.connection.execute("INSERT INTO children (id, parent) VALUES (1, 99)")

    results = in_a_group(store, lambda: None, [orphan, member(store, "c")])
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], alkstore.StorageError)
    assert "FOREIGN KEY" in str(results[1])
    assert committed(store) == {"first", "c"}


def test_a_group_nobody_comes_for_is_committed_by_its_member(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread counted as waiting that never takes the turn (it gave up): the member
    that handed the group on commits it itself after ORPHAN_CHECK."""
    commits = Commits(monkeypatch)
    ghost = -1

    def alone() -> None:
        with store.transaction() as tx:
            insert(tx, "alone")
            committer(store)._waiting.add(ghost)

    thread = threading.Thread(target=alone)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "nobody committed the group"
    committer(store)._waiting.discard(ghost)
    assert committed(store) == {"alone"}
    assert commits.sizes == [1]


def test_a_waiting_lease_renewal_ends_the_group(store: alkstore.Store) -> None:
    """With a reserved connection waiting for the write lock (`_busy.Gate`, ADR 0012) the
    member commits instead of handing the transaction on, and the next one waits."""
    gate = store._runtime.engine.gate  # type: ignore[attr-defined]
    seen: dict[str, set[str]] = {}

    def first() -> None:
        gate.enter()  # a renewal waits from now on

    def released() -> None:
        time.sleep(0.2)
        seen["while the renewal waits"] = committed(store)
        gate.leave()

    releaser = threading.Thread(target=released)
    releaser.start()
    results = in_a_group(store, first, [member(store, "b")])
    releaser.join(5)
    assert results == [None, None]
    assert seen["while the renewal waits"] == {"first"}
    assert committed(store) == {"first", "b"}


def test_transactions_and_store_calls_inside_a_transaction_are_transaction_open(
    store: alkstore.Store,
) -> None:
    with store.transaction() as tx:
        insert(tx, "outer")
        with pytest.raises(alkstore.TransactionOpen), store.transaction():
            pass
        with pytest.raises(alkstore.TransactionOpen):
            store.queue("q").enqueue(1)
    assert committed(store) == {"outer"}
    assert store.queue("q").enqueue(2) > 0  # outside: this thread's own connection again


def test_a_store_closed_under_a_transaction_fails_it_with_a_storage_error(
    tmp_path: Path,
) -> None:
    store = alkstore.connect(f"sqlite:///{tmp_path / 'closed.db'}")
    store.migrate()
    with pytest.raises(alkstore.StorageError), store.transaction() as tx:
        tx.enqueue("q", 1)
        store.close()
    assert not committer(store)._turn.locked()
    with pytest.raises(alkstore.AlkstoreError, match="closed"), store.transaction():
        pass


def test_claims_acks_and_enqueues_keep_their_own_connections(tmp_path: Path) -> None:
    """The one-statement transactions of `Engine.run` (a claim loop's claims, the ack
    batcher's acks, `queue.enqueue`) are not group members: a thread that only makes
    those opens its own connection and never takes the turn."""
    store = alkstore.connect(f"sqlite:///{tmp_path / 'own.db'}")
    try:
        store.migrate()
        owner = committer(store)
        engine = store._runtime.engine
        assert isinstance(engine, SqliteEngine)
        seen: dict[str, object] = {}

        def producer() -> None:
            queue = store.queue("q")
            queue.enqueue(1)
            job = queue.claim()
            assert job is not None
            job.ack()
            seen["conn"] = getattr(engine._local, "conn", None)

        owner._turn.acquire()  # a store transaction of another thread holds the turn
        try:
            thread = threading.Thread(target=producer)
            thread.start()
            thread.join(10)
        finally:
            owner._turn.release()
        assert not thread.is_alive(), "the producer waited for the turn"
        assert isinstance(seen["conn"], apsw.Connection)
        assert seen["conn"] is not owner._conn
    finally:
        store.close()


def test_threads_with_random_failures_commit_exactly_the_blocks_that_ended_well(
    store: alkstore.Store,
) -> None:
    threads, per_thread = 8, 150
    kept: list[str] = []
    lock = threading.Lock()
    rng = random.Random(17)
    plans = [[rng.random() < 0.25 for _ in range(per_thread)] for _ in range(threads)]

    def work(t: int) -> None:
        for i, fail in enumerate(plans[t]):
            name = f"{t}-{i}"
            try:
                with store.transaction() as tx:
                    insert(tx, name)
                    tx.enqueue("q", {"name": name})
                    if fail:
                        raise RuntimeError("rolled back")
            except RuntimeError:
                continue
            with lock:
                kept.append(name)
            if i % 50 == 0:  # returned: committed
                assert name in committed(store)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert committed(store) == set(kept)
    assert len(kept) == sum(not fail for plan in plans for fail in plan)
    assert store.queue("q").stats().ready == len(kept)


def test_a_child_process_starts_with_a_free_turn_and_no_connection(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn a parent's thread held at a fork is free in the child (no thread of the
    child could give it back), and the parent's writer connection is not the child's."""
    monkeypatch.setattr(_busy, "WRITERS_WAIT", 0.5)
    owner = committer(store)
    member(store, "parent")()  # the writer connection is open
    owner._take()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once
            try:
                owner._take()
                ok = owner._conn is None and owner._group is None
            except BaseException:  # the exit code says it
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with pytest.raises(alkstore.DatabaseBusy):
            owner._take()  # the parent's turn is still taken
    finally:
        owner._turn.release()
    assert committed(store) == {"parent"}
