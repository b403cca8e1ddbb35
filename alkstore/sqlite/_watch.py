"""Cross-process commit detection for SQLite: inotify on the WAL file, data_version to confirm.

A commit in WAL mode appends frames to `<db>-wal` with write(2), which Linux
reports through inotify at once; `PRAGMA data_version` on the watcher's own
connection then confirms that another connection really committed (a rolled-back
transaction that spilled pages to the WAL changes nothing). The frames are
written just before the commit is published, so after a write the watcher keeps
checking data_version every millisecond for HOT_WINDOW. Idle cost is one
blocked poll(2) (not select(2), which fails on descriptors >= 1024). Where inotify
is not available the watcher falls back to checking data_version every
millisecond (on Linux, with a warning: it costs CPU while idle). A failing check
is logged at WARNING and retried with backoff; consumers re-poll meanwhile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys
import threading
import time
from collections.abc import Callable

import apsw

from alkstore import _wake

POLL_INTERVAL = 0.001  # fallback: seconds between data_version checks
SAFETY_INTERVAL = 0.25  # with inotify: confirm data_version at least this often
# WAL frames are written before the commit is published in the shared index, so
# after a write we keep checking data_version every POLL_INTERVAL for a while.
HOT_WINDOW = 0.05
# After a write it saw and checked, the watcher polls again no sooner than this: writes
# that come faster are seen together, one check and one wake for all of them. Under a
# stream of commits (a worker's handlers, each committing its own transaction) a check
# per commit took the GIL several times per commit from the threads doing the work (ADR
# 0005, addendum 2026-12-01c). A write is still checked as soon as it is seen; one that
# comes within COALESCE of the last is checked at most COALESCE late.
COALESCE = 0.0005
RETRY = (0.05, 5.0)  # seconds: first and longest wait before checking again after a failure
_IN_MODIFY = 0x00000002
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000


def _inotify_fd(path: str) -> int | None:
    """An inotify descriptor watching `path` for writes; None where inotify does not
    exist; OSError (with the cause) where it fails."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        init, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    if add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
        errno = ctypes.get_errno()
        os.close(fd)
        raise OSError(errno, os.strerror(errno))
    return int(fd)


class Watcher:
    """A thread that calls `fire()` whenever another connection commits to `path`."""

    def __init__(self, path: str, fire: Callable[[], None]) -> None:
        self._path = path
        self._fire = fire
        self._stop = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        # The baseline is read before the constructor returns: a commit made right
        # after `store.listen()` must be seen as new.
        self._conn = apsw.Connection(path)
        self._conn.set_busy_timeout(5_000)
        self._baseline = _data_version(self._conn)  # the connection also keeps the -wal
        self._thread = threading.Thread(target=self._run, name="alkstore-sqlite-wake", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._stop_w, b"x")
        self._thread.join()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _run(self) -> None:
        try:
            fd = self._inotify()
            try:
                self._loop(fd)
            finally:
                if fd is not None:
                    os.close(fd)
        finally:
            self._conn.close()

    def _inotify(self) -> int | None:
        try:
            return _inotify_fd(self._path + "-wal")
        except OSError as exc:
            _wake.log.warning(
                "SQLite wake: no inotify watch on %s-wal (%s); checking data_version every "
                "%g ms instead, which costs CPU while idle",
                self._path,
                exc.strerror,
                POLL_INTERVAL * 1000,
            )
            return None

    def _loop(self, fd: int | None) -> None:
        trouble = _wake.Trouble(f"SQLite wake watcher on {self._path}")
        poller = None
        if fd is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(self._stop_r, select.POLLIN)
        last = self._baseline
        hot_until = 0.0
        retry = RETRY[0]
        wrote = False
        while not self._stop.is_set():
            try:
                if fd is None or poller is None:
                    self._stop.wait(POLL_INTERVAL)
                else:
                    if wrote:  # the last turn saw a write: let the next ones gather
                        self._stop.wait(COALESCE)
                    hot = time.monotonic() < hot_until
                    timeout = POLL_INTERVAL if hot else SAFETY_INTERVAL
                    wrote = any(ready == fd for ready, _ in poller.poll(timeout * 1000))
                    if wrote:
                        _drain(fd)
                        hot_until = time.monotonic() + HOT_WINDOW
                now = _data_version(self._conn)
            except Exception as exc:  # apsw.Error, OSError: keep watching, say so
                trouble.failed(exc, f"checking again in {retry:g} s; consumers re-poll meanwhile")
                self._stop.wait(retry)
                retry = min(retry * 2, RETRY[1])
                continue
            retry = RETRY[0]
            trouble.recovered()
            if now != last:
                last = now
                self._fire()


def _data_version(conn: apsw.Connection) -> int:
    value = conn.execute("PRAGMA data_version").fetchall()[0][0]
    assert isinstance(value, int)
    return value


def _drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                return
        except BlockingIOError:
            return
