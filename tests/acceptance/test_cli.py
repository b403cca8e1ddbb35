"""The CLI as a user runs it: a subprocess, real databases, exit codes and messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"}
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_migrate_is_idempotent(backend: Backend) -> None:
    args = ["--db", backend.url, "--namespace", backend.namespace]
    first = run("migrate", *args)
    assert first.returncode == 0, first.stderr
    versions = ", ".join(f"{v:04d}" for v in range(1, 16))
    assert first.stdout.strip() == f"migrated {backend.namespace}: {versions}"
    again = run("migrate", *args)
    assert again.stdout.strip() == f"migrated {backend.namespace}: nothing to do"


def test_sql_prints_ddl_without_applying_it(backend: Backend) -> None:
    args = ["--db", backend.url, "--namespace", backend.namespace]
    out = run("sql", *args)
    assert out.returncode == 0, out.stderr
    assert "CREATE TABLE" in out.stdout and backend.namespace in out.stdout
    pending = run("sql", "--pending", *args)
    assert "-- migration 0001_event_log" in pending.stdout
    store = backend.connect()
    try:
        # nothing was applied: reading the log still says "not migrated"
        try:
            store.log.head()
            raise AssertionError("`alkstore sql` must not create tables")
        except alkstore.NotMigrated:
            pass
        store.migrate()
    finally:
        store.close()
    after = run("sql", "--pending", *args)
    assert "-- migration" not in after.stdout


def test_events_tail_prints_the_log(backend: Backend) -> None:
    store = backend.connect()
    try:
        store.migrate()
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=5), key="order-5")
    finally:
        store.close()
    out = run("events", "tail", "--db", backend.url, "--namespace", backend.namespace)
    assert out.returncode == 0, out.stderr
    fields = out.stdout.strip().split("\t")
    assert fields[0] == "1" and fields[2] == "test.order_placed" and fields[3] == "order-5"
    assert json.loads(fields[4])["order_id"] == 5


def test_default_database_is_the_embedded_file(tmp_path: Path) -> None:
    out = run("migrate", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "alkstore.db").exists()


def test_bad_url_is_a_clear_error() -> None:
    out = run("migrate", "--db", "mysql://localhost/x")
    assert out.returncode == 2
    assert "invalid database URL 'mysql://localhost/x'" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_namespace_is_a_clear_error() -> None:
    out = run("migrate", "--db", "sqlite:///:memory:", "--namespace", "x;drop")
    assert out.returncode == 2
    assert "invalid namespace name" in out.stderr
