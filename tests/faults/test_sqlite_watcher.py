"""The SQLite wake watcher (alkstore/sqlite/_watch.py) when something goes wrong: it says so
at WARNING with the cause, keeps going, and commits still wake listeners.

- No inotify watch on the `-wal` file (here: a database not in WAL mode, so there is
  none to watch; elsewhere: the user's inotify limits are used up): the watcher falls
  back to checking data_version every millisecond, which costs CPU while idle.
- `PRAGMA data_version` fails (here: another process holds every lock byte of the
  `-shm` file, so SQLite gives up with "locking protocol" after about 10 s): the watcher
  retries with backoff and logs the recovery at INFO.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

import alkstore
from alkstore.sqlite import _watch
from tests.events import OrderPlaced

HOLD_SHM_LOCKS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 8, 120, 0)  # WAL_WRITE_LOCK .. READ_LOCK(4)
print("locked", flush=True)
sys.stdin.readline()
"""


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "alkstore.wake" and r.levelno == logging.WARNING
    ]


def test_without_inotify_the_watcher_warns_and_still_sees_commits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    path = str(tmp_path / "rollback-journal.db")
    writer = apsw.Connection(path)
    # The fallback reads the file every 1 ms, and without WAL a reader's shared lock
    # keeps a writer from committing meanwhile: wait for it, as alkstore's connections do
    # (a bare connection fails at once: CI at 66629b4 failed with "database is locked")
    writer.set_busy_timeout(5000)
    writer.execute("CREATE TABLE t (x)")  # journal_mode=delete: there is no -wal file
    fired = threading.Event()
    watcher = _watch.Watcher(path, fired.set)
    try:
        deadline = time.monotonic() + 5
        while not warnings_of(caplog) and time.monotonic() < deadline:
            time.sleep(0.01)
        [warning] = warnings_of(caplog)
        assert f"no inotify watch on {path}-wal" in warning
        assert "No such file or directory" in warning and "every 1 ms" in warning
        writer.execute("INSERT INTO t VALUES (1)")
        assert fired.wait(5), "the polling fallback saw no commit"
    finally:
        watcher.stop()
        writer.close()


def test_a_failing_data_version_is_logged_retried_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    url = f"sqlite:///{tmp_path / 'app.db'}"
    store = alkstore.connect(url)
    store.migrate()
    other = alkstore.connect(url)
    locker = None
    try:
        listener = store.listen()
        locker = subprocess.Popen(
            [sys.executable, "-c", HOLD_SHM_LOCKS, str(tmp_path / "app.db-shm")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        deadline = time.monotonic() + 60  # SQLite retries for about 10 s
        while not warnings_of(caplog) and time.monotonic() < deadline:
            time.sleep(0.05)
        [warning] = warnings_of(caplog)
        assert "SQLite wake watcher" in warning and "locking protocol" in warning, warning
        assert "consumers re-poll meanwhile" in warning
    finally:
        if locker is not None:
            assert locker.stdin is not None
            locker.stdin.write("go\n")
            locker.stdin.close()
            locker.wait(10)
            if locker.stdout is not None:
                locker.stdout.close()
    try:
        deadline = time.monotonic() + 30
        while not any("works again" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the watcher never recovered"
            time.sleep(0.05)
        while listener.wait(0.05):
            pass
        with other.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        assert listener.wait(5), "no wake after the watcher recovered"
    finally:
        other.close()
        store.close()


def test_a_stream_of_commits_is_seen_together_and_the_last_one_always(tmp_path: Path) -> None:
    """ADR 0005, addendum 2026-12-01c: commits that come faster than COALESCE share a
    check and a wake; the last of a burst is still seen, and a commit after a quiet spell
    is seen at once."""
    path = str(tmp_path / "stream.db")
    writer = apsw.Connection(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA synchronous = NORMAL")  # as alkstore's: no fsync per commit
    writer.execute("CREATE TABLE t (x)")
    fires: list[float] = []
    watcher = _watch.Watcher(path, lambda: fires.append(time.monotonic()))
    try:
        commits = 300
        began = time.monotonic()
        for n in range(commits):  # about 0.1-0.2 ms apart: faster than COALESCE
            time.sleep(0.0001)
            last = time.monotonic()  # (taken before: its wake may come before execute returns)
            writer.execute("INSERT INTO t VALUES (?)", (n,))
        deadline = last + 5
        while not (fires and fires[-1] >= last) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert fires and fires[-1] >= last, "no wake after the burst's last commit began"
        # at most one check per COALESCE while the commits come: a check per commit
        # before (294 wakes here, against 97)
        bound = (last - began) / _watch.COALESCE + 3
        assert len(fires) <= bound, (len(fires), bound, commits)

        time.sleep(2 * _watch.HOT_WINDOW)  # quiet: the watcher waits in poll(2)
        seen = len(fires)
        writer.execute("INSERT INTO t VALUES (-1)")
        committed = time.monotonic()
        while len(fires) == seen and time.monotonic() < committed + 5:
            time.sleep(0.0002)
        assert len(fires) > seen
        assert fires[seen] - committed < 0.1  # at once, give or take a busy machine
    finally:
        watcher.stop()
        writer.close()
