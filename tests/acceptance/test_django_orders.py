"""The Django example (examples/django_orders) as a user runs it, on PostgreSQL with the
psycopg 3 backend: Django's test runner over its outbox tests, and the project end to
end through manage.py, each step a process of its own (docs/adr/0024)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.test_examples import ROOT, Place, environment, pg_place
from tests.conftest import Backend

MANAGE = ("-m", "examples.django_orders.manage")


@pytest.fixture
def place(pg_backend: Backend) -> Iterator[Place]:
    with pg_place(pg_backend) as found:
        yield found


def manage(
    place: Place | None, url: str, *args: str, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    """`python -m examples.django_orders.manage ARGS` on `url` (in place's namespace)."""
    env = environment() | {"DATABASE_URL": url}
    if place is not None:
        env["ALKSTORE_NAMESPACE"] = place.namespace
    done = subprocess.run(
        [sys.executable, *MANAGE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_djangos_test_runner_passes_the_outbox_tests(pg_url: str) -> None:
    """`manage.py test`: Django makes its test database (test_<name>) and drops it."""
    done = manage(None, pg_url, "test", "examples.django_orders.orders", "-v", "2", "--noinput")
    report = done.stdout + done.stderr
    assert re.search(r"Ran 8 tests in .*\n\nOK", report), report
    assert "Creating test database for alias 'default'" in report


def test_the_project_places_an_order_and_its_worker_sends_the_receipt(
    place: Place, tmp_path: Path
) -> None:
    url = place.url  # the application's tables in a schema of their own (search_path)
    ns = place.namespace
    manage(place, url, "migrate")
    assert f"migrated {ns}" in manage(place, url, "alkstore", "migrate").stdout
    manage(place, url, "alkstore", "subscriptions", "add", "orders.audit", "django_orders.*")
    assert manage(place, url, "place_order", "ann@example.com", "1250").stdout.strip() == (
        "order 1 placed"
    )
    refused = manage(place, url, "place_order", "bob@example.com", "1000000", ok=False)
    assert refused.returncode == 1 and "over the credit limit" in refused.stderr

    with psycopg.connect(url, autocommit=True) as conn:
        with background(place, url, tmp_path / "relay.log", "alkstore", "relay") as relay:
            deadline = time.monotonic() + 30
            while not conn.execute(
                f"SELECT 1 FROM {ns}.jobs WHERE queue = 'orders.audit'"
            ).fetchall():
                assert relay.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "relay.log"
                ).read_text()
                time.sleep(0.1)
        assert relay.returncode == 0, (tmp_path / "relay.log").read_text()  # SIGTERM: clean

        worker = manage(
            place, url, "alkstore", "worker", "examples.django_orders.orders.jobs:worker", "--once"
        )
        assert "'ack': 2" in worker.stderr, worker.stderr
        assert "audit: order 1, 1250 cents" in worker.stderr, worker.stderr
        status = manage(place, url, "alkstore", "status").stdout
        assert "log head: 1" in status and "orders.audit" in status, status

        # what the processes left behind
        assert conn.execute(
            "SELECT id, email, receipt_sent FROM orders_order ORDER BY id"
        ).fetchall() == [(1, "ann@example.com", True)]
        assert conn.execute(f"SELECT type, key FROM {ns}.events").fetchall() == [
            ("django_orders.order_placed", "order-1")
        ]
        assert conn.execute(f"SELECT count(*) FROM {ns}.jobs").fetchall() == [(0,)]


@contextmanager
def background(place: Place, url: str, log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`manage.py ARGS` running until the block ends, then stopped with SIGTERM."""
    env = environment() | {"DATABASE_URL": url, "ALKSTORE_NAMESPACE": place.namespace}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *MANAGE, *args], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_manage_py_alkstore_without_a_command_says_what_to_name() -> None:
    done = manage(None, "postgresql://127.0.0.1:5432/x", "alkstore", ok=False)
    assert done.returncode != 0 and "name an alkstore command" in done.stderr
