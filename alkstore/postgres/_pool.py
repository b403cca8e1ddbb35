"""A small LIFO connection pool.

The most recently returned connection is handed out first, so a steady stream
of short operations keeps one warm backend instead of rotating through several
(psycopg_pool hands connections out in FIFO order: measured about 45 µs more
per single-statement operation on this 2-core machine; docs/performance.md).
Connections are opened on demand up to `size`; a connection that comes back
closed, broken or inside a transaction is discarded, so a restarted server or a
terminated backend costs one failed operation, never a poisoned pool.

Every connection alkstore opens (pool, notifier, listener, the probe) uses the
conninfo `conninfo()` builds: a connect timeout, so a checkout never waits on an
unreachable server for longer than that, and TCP keepalives plus a TCP user
timeout, so a peer that went silent (a partition, a dead host) breaks the
connection instead of leaving a statement waiting forever (ADR 0001 addendum).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import conninfo as _conninfo
from psycopg import pq
from psycopg.pq import TransactionStatus

from alkstore import _errors
from alkstore.postgres import _conn

CHECKOUT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 5.0  # seconds; alkstore.connect(..., connect_timeout=)
# A silent peer breaks an idle connection after about 10 + 5 x 3 s, and a connection
# whose sent data goes unacknowledged after 30 s (Linux; ignored elsewhere by libpq).
KEEPALIVES: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
if pq.version() >= 120000:  # libpq 12 added tcp_user_timeout
    KEEPALIVES["tcp_user_timeout"] = "30000"  # milliseconds


POOLER_PARAM = "pooler"  # alkstore's own URL parameter, never passed to libpq
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def split_pooler(url: str) -> tuple[str, bool | None]:
    """`url` without alkstore's `pooler=` parameter, and its value (None: not given).

    libpq refuses parameters it does not know, so alkstore takes its own out first."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _errors.InvalidURL(url, str(exc)) from None
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    values = [value for key, value in pairs if key == POOLER_PARAM]
    if not values:
        return url, None
    text = values[-1].lower()
    if text not in _TRUE + _FALSE:
        raise _errors.InvalidURL(
            url, f"{POOLER_PARAM}={values[-1]!r}: use {POOLER_PARAM}=true or {POOLER_PARAM}=false"
        )
    rest = urlencode([(key, value) for key, value in pairs if key != POOLER_PARAM])
    return urlunsplit(parts._replace(query=rest)), text in _TRUE


def conninfo(url: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> str:
    """`url` as a libpq conninfo string with alkstore's connection defaults added.

    A parameter the URL already sets wins (`?connect_timeout=20&keepalives_idle=60`):
    psycopg's own keyword arguments would override the URL, so alkstore adds only
    what is missing. libpq counts the timeout in whole seconds, at least 2: it is
    rounded up here, and psycopg raises anything below 2 to 2."""
    try:
        params = _conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise _errors.InvalidURL(url, str(exc)) from None
    defaults = {"connect_timeout": str(max(1, math.ceil(connect_timeout))), **KEEPALIVES}
    for key, value in defaults.items():
        params.setdefault(key, value)
    return _conninfo.make_conninfo("", **params)


class Pool:
    """Up to `size` autocommit connections to `conninfo` (build it with `conninfo()`);
    `configure` runs on each new one."""

    def __init__(
        self, conninfo: str, size: int, configure: Callable[[_conn.Connection], None]
    ) -> None:
        self._conninfo = conninfo
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
            conn = _conn.Connection.connect(self._conninfo, autocommit=True)
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
