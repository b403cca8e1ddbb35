"""Connections to a server that stops answering fail in bounded time (ADR 0001 addendum).

A "black hole" is a TCP server on 127.0.0.1 that accepts connections and never
answers; a "partition" proxy forwards to the real server until the test cuts it,
then swallows everything and accepts new connections without answering. Neither
needs root or packet filters. Every test here ends within a few seconds; before
the connect timeout, each of them hung for minutes or for good.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import alkstore
from alkstore.postgres import _engine, _pool
from tests.conftest import Backend
from tests.events import OrderPlaced

TIMEOUT = 2  # seconds: libpq's smallest connect timeout
SLACK = 3.0  # seconds on top of it for a loaded 2-core machine


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv() on it
    except OSError:
        pass
    sock.close()


class BlackHole:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="black-hole", daemon=True)
        self._thread.start()

    def url(self, query: str = "") -> str:
        return f"postgresql://root@127.0.0.1:{self.port}/nowhere{query}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            self.accepted.append(conn)

    def close(self) -> None:
        _close(self._server)
        self._thread.join(5)
        for conn in self.accepted:
            _close(conn)


class PartitionProxy:
    """Forwards 127.0.0.1:port to the real server until `partition()`; from then on it
    reads and drops every byte and accepts new connections without answering."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._server.getsockname()[1]
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name="proxy", daemon=True)]
        self._threads[0].start()

    def partition(self) -> None:
        self._cut.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._cut.is_set():
                continue  # held open, never answered
            upstream = socket.create_connection(self._upstream)
            self._sockets.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pipe, args=(src, dst), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                if not self._cut.is_set():
                    dst.sendall(data)
            except OSError:
                break
        if not self._cut.is_set():
            _close(dst)

    def close(self) -> None:
        _close(self._server)
        for sock in self._sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(5)


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    try:
        yield hole
    finally:
        hole.close()


def _elapsed_failure(call: Any) -> tuple[float, alkstore.StorageError]:
    start = time.monotonic()
    with pytest.raises(alkstore.StorageError) as info:
        call()
    return time.monotonic() - start, info.value


def test_connect_to_a_server_that_never_answers_fails_within_the_timeout(
    black_hole: BlackHole,
) -> None:
    elapsed, error = _elapsed_failure(
        lambda: alkstore.connect(black_hole.url(), connect_timeout=TIMEOUT)
    )
    assert TIMEOUT - 0.5 <= elapsed < TIMEOUT + SLACK, (elapsed, error)
    assert "timeout" in str(error), error
    assert black_hole.accepted, "the black hole never saw the connection"


def test_a_connect_timeout_in_the_url_wins_over_the_argument(black_hole: BlackHole) -> None:
    url = black_hole.url(f"?connect_timeout={TIMEOUT}")
    elapsed, error = _elapsed_failure(lambda: alkstore.connect(url, connect_timeout=60))
    assert elapsed < TIMEOUT + SLACK, (elapsed, error)


def test_pool_checkout_fails_within_the_timeout_and_frees_its_slot(black_hole: BlackHole) -> None:
    pool = _pool.Pool(_pool.conninfo(black_hole.url(), TIMEOUT), 1, lambda conn: None)
    try:
        for _ in range(2):  # the failed attempt gave its slot back: no "no connection free"
            elapsed, error = _elapsed_failure(pool.get)
            assert elapsed < TIMEOUT + SLACK, (elapsed, error)
            assert "cannot connect" in str(error), error
    finally:
        pool.close()


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "5", True, None])
def test_connect_timeout_must_be_a_positive_finite_number(value: Any) -> None:
    with pytest.raises(alkstore.InvalidArgument, match="connect_timeout"):
        alkstore.connect("postgresql://root@127.0.0.1:1/x", connect_timeout=value)


def test_conninfo_adds_timeout_and_keepalives_and_keeps_what_the_url_sets() -> None:
    params = conninfo_to_dict(_pool.conninfo("postgresql://h/db", 2.5))
    assert params["connect_timeout"] == "3"  # whole seconds, rounded up
    assert params["keepalives"] == "1"
    assert params["keepalives_idle"] == "10"
    assert params["host"] == "h" and params["dbname"] == "db"
    url = "postgresql://h/db?connect_timeout=20&keepalives_idle=60&application_name=app"
    params = conninfo_to_dict(_pool.conninfo(url, 5))
    assert (params["connect_timeout"], params["keepalives_idle"]) == ("20", "60")
    assert params["application_name"] == "app"
    with pytest.raises(alkstore.InvalidURL):
        _pool.conninfo("postgresql://h/db?no_such_option=1")


def test_pooled_connections_carry_the_timeout_and_keepalives(pg_backend: Backend) -> None:
    with pg_backend.migrated(connect_timeout=3) as store:
        engine = store.engine
        assert isinstance(engine, _engine.PostgresEngine)
        with engine.connection() as conn:
            params = conn.info.get_parameters()
        assert params["connect_timeout"] == "3"
        assert params["keepalives_idle"] == "10"
    url = f"{pg_backend.url}?connect_timeout=17&keepalives_idle=60"
    with alkstore.connect(url, namespace=pg_backend.namespace) as store:
        engine = store.engine
        assert isinstance(engine, _engine.PostgresEngine)
        with engine.connection() as conn:
            params = conn.info.get_parameters()
        assert (params["connect_timeout"], params["keepalives_idle"]) == ("17", "60")


def _notifier_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "alkstore-pg-notify" and t.is_alive()]


def test_close_returns_promptly_when_the_server_stops_answering(pg_backend: Backend) -> None:
    with psycopg.connect(pg_backend.url, connect_timeout=5) as admin:
        proxy = PartitionProxy((admin.info.host, admin.info.port))
    url = f"postgresql://root@127.0.0.1:{proxy.port}/{pg_backend.url.rpartition('/')[2]}"
    before = set(_notifier_threads())
    try:
        store = alkstore.connect(url, namespace=pg_backend.namespace, connect_timeout=TIMEOUT)
        store.migrate()
        listener = store.listen()  # starts the LISTEN thread
        with store.transaction() as tx:  # the notifier connects and sends a NOTIFY
            tx.append(OrderPlaced(order_id=1))
        assert listener.wait(10), "no wake through the proxy"
        time.sleep(0.05)  # past the notifier's gap
        proxy.partition()
        store.engine.committed()  # a NOTIFY into the void: the notifier waits for a reply
        time.sleep(0.2)
        (notifier,) = set(_notifier_threads()) - before

        closer = threading.Thread(target=store.close, name="closer", daemon=True)
        start = time.monotonic()
        closer.start()
        closer.join(_engine.CLOSE_WAIT + SLACK)
        elapsed = time.monotonic() - start
        assert not closer.is_alive(), "store.close() hangs on a server that stopped answering"
        assert elapsed < _engine.CLOSE_WAIT + SLACK, elapsed
        assert notifier.is_alive(), "expected the notifier to still wait on its NOTIFY"

        # A new connection through the cut network fails within the timeout too.
        elapsed, error = _elapsed_failure(
            lambda: alkstore.connect(url, namespace=pg_backend.namespace, connect_timeout=TIMEOUT)
        )
        assert elapsed < TIMEOUT + SLACK, (elapsed, error)
    finally:
        proxy.close()
    notifier.join(10)  # its connection broke with the proxy: the daemon thread ends
    assert not notifier.is_alive()
