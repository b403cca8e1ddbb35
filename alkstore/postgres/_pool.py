"""A small LIFO connection pool.

The most recently returned connection is handed out first, so a steady stream
of short operations keeps one warm backend instead of rotating through several
(psycopg_pool hands connections out in FIFO order: measured about 45 µs more
per single-statement operation on this 2-core machine; docs/performance.md).
Connections are opened on demand up to `size`; a connection that comes back
closed, broken or inside a transaction is discarded, so a restarted server or a
terminated backend costs one failed operation, never a poisoned pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg.pq import TransactionStatus

from alkstore import _errors
from alkstore.postgres import _conn

CHECKOUT_TIMEOUT = 30.0


class Pool:
    def __init__(self, url: str, size: int, configure: Callable[[_conn.Connection], None]) -> None:
        self._url = url
        self._size = size
        self._configure = configure
        self._idle: list[_conn.Connection] = []
        self._count = 0  # open connections, idle or lent
        self._closed = False
        self._cond = threading.Condition()

    @contextmanager
    def connection(self) -> Iterator[_conn.Connection]:
        conn = self.get()
        try:
            yield conn
        finally:
            self.put(conn)

    def get(self) -> _conn.Connection:
        deadline = time.monotonic() + CHECKOUT_TIMEOUT
        with self._cond:
            while True:
                if self._closed:
                    raise _errors.AlkstoreError("the store is closed")
                if self._idle:
                    return self._idle.pop()  # LIFO: the warmest backend
                if self._count < self._size:
                    self._count += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _errors.StorageError(
                        f"no PostgreSQL connection free within {CHECKOUT_TIMEOUT:g}s "
                        f"(pool_size={self._size})"
                    )
                self._cond.wait(remaining)
        try:
            conn = _conn.Connection.connect(self._url, autocommit=True)
            self._configure(conn)
            return conn
        except BaseException as exc:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            if isinstance(exc, psycopg.Error):
                raise _errors.StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
            raise

    def put(self, conn: _conn.Connection) -> None:
        reusable = conn.reusable and conn.info.transaction_status == TransactionStatus.IDLE
        with self._cond:
            if reusable and not self._closed:
                self._idle.append(conn)
                self._cond.notify()
                return
            self._count -= 1
            self._cond.notify()
        conn.close()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for conn in idle:
            conn.close()
