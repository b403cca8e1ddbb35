"""Every CLI command refuses a database a newer alkstore migrated: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

import alkstore
from tests.acceptance.test_cli import run
from tests.conftest import Backend
from tests.contract.test_schema_version import message, newer

COMMANDS = {
    "migrate": ["migrate"],
    "sql --pending": ["sql", "--pending"],
    "status": ["status"],
    "relay": ["relay"],
    "scheduler": ["scheduler"],
    "events tail": ["events", "tail"],
    "schedules list": ["schedules", "list"],
    "worker": ["worker", "newer_schema_jobs:worker", "--once"],
}

WORKER_MODULE = """
import alkstore
import relay

worker = relay.Worker(alkstore.connect())


@worker.handler("mail")
def send(job):
    pass
"""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_commands_refuse_a_newer_schema(backend: Backend, tmp_path: Path, command: str) -> None:
    with backend.migrated():
        pass
    versions = newer(backend)
    (tmp_path / "newer_schema_jobs.py").write_text(WORKER_MODULE)
    args = [*COMMANDS[command], "--db", backend.url, "--namespace", backend.namespace]
    out = run(*args, cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.splitlines() == [f"alkstore: {message(versions)}"]
    assert out.stdout == ""
    with pytest.raises(alkstore.SchemaTooNew):  # untouched: still one version ahead
        backend.connect()
