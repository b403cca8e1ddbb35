"""The message brokers the sink tests publish to (docs/adr/0026), treated like PostgreSQL:
the local services (NATS with JetStream on 4222, RabbitMQ on 5672 as guest/guest, Redis
on 6379) are skipped with a one-line reason when unreachable, except under CI=true,
where that is a failure (`.ci/run` starts them). `OwnBroker` runs a private
`redis-server`, `nats-server` or RabbitMQ node on a free port, for the tests that stop a
broker.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import IN_CI

REDIS_URL = os.environ.get("ALKSTORE_TEST_REDIS", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("ALKSTORE_TEST_NATS", "nats://127.0.0.1:4222")
AMQP_URL = os.environ.get("ALKSTORE_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
T = TypeVar("T")


def _port_of(url: str, default: int) -> tuple[str, int]:
    hostport = url.split("://", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.partition(":")
    return host, int(port or default)


def require(url: str, default_port: int, what: str) -> str:
    """`url` if its broker accepts connections; else skip (fail under CI=true)."""
    host, port = _port_of(url, default_port)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        reason = f"{what} not reachable at {host}:{port}: {exc}"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return url


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


class OwnBroker:
    """A private broker process (redis-server or nats-server) on a free port, which a
    test may stop and start again (same port, same data directory)."""

    def __init__(self, kind: str, workdir: Path) -> None:
        binary = shutil.which(f"{kind}-server") or f"/usr/sbin/{kind}-server"
        if kind == "rabbitmq":  # the script itself: /usr/sbin's changes user and directory
            binary = "/usr/lib/rabbitmq/bin/rabbitmq-server"
        self.env: dict[str, str] | None = None
        if not Path(binary).exists():
            reason = f"{kind}-server is not installed"
            if IN_CI:
                pytest.fail(f"CI=true and {reason}", pytrace=False)
            pytest.skip(reason)
        self.kind = kind
        self.port = free_port()
        self.workdir = workdir
        if kind == "redis":
            self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            self.args += ["--appendonly", "yes", "--dir", str(workdir)]
            self.url = f"redis://127.0.0.1:{self.port}/0"
        elif kind == "nats":
            self.args = [binary, "-a", "127.0.0.1", "-p", str(self.port), "-js"]
            self.args += ["-sd", str(workdir)]
            self.url = f"nats://127.0.0.1:{self.port}"
        else:  # a node of its own beside the machine's (own name, ports, data, no plugins)
            self.args = [binary]
            self.env = {
                **os.environ,
                "HOME": str(workdir),
                "RABBITMQ_NODENAME": f"alktest{self.port}@localhost",
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(free_port()),
                "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
                "RABBITMQ_LOG_BASE": str(workdir / "log"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "plugins"),
                "RABBITMQ_CONFIG_FILE": str(workdir / "none"),
            }
            self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.workdir / f"{self.kind}.log", "ab")
        self.proc = subprocess.Popen(
            self.args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,  # stop() ends the whole group (rabbitmq: the Erlang VM)
        )
        log.close()

        def up() -> bool:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_until(up, 60, f"{self.kind}-server on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            wait_until(lambda: not _listening(self.port), 30, f"{self.kind} stopping")
        self.proc = None


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@contextmanager
def own_broker(kind: str, workdir: Path) -> Iterator[OwnBroker]:
    broker = OwnBroker(kind, workdir)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
