"""Queue names that are values (`email.send`, `billing-v2`) through the CLI as a user runs
it: status, events replay and worker (ADR 0006, addendum 2026-12-01)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import alkstore
from tests.acceptance.test_cli_relay import section
from tests.conftest import Backend
from tests.events import OrderPlaced

ROOT = Path(__file__).resolve().parents[2]
QUEUES = ("billing-v2", "email.send")


def run(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ALKSTORE_DB": backend.url, "ALKSTORE_TEST_NS": backend.namespace}
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args, "--db", backend.url],
        cwd=ROOT,
        env={**env, "ALKSTORE_NAMESPACE": backend.namespace},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_replay_and_worker_take_names_with_dots_and_dashes(backend: Backend) -> None:
    ns = ["--namespace", backend.namespace]
    with backend.migrated() as store:
        for queue in QUEUES:
            store.subscribe(queue, ["test.*"], start="beginning")
        with store.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=n) for n in range(3)])
        assert store.relay_batch() == (6, 3)

        status = run(backend, "status", *ns)
        assert status.returncode == 0, status.stderr
        assert section(status.stdout, "subscriptions") == list(QUEUES), status.stdout
        assert section(status.stdout, "queues") == list(QUEUES), status.stdout
        assert "  email.send: checkpoint 3, 0 events / caught up; jobs ready 3" in status.stdout

        replay = run(backend, "events", "replay", "--queue", "email.send", "--from", "2", *ns)
        assert replay.returncode == 0, replay.stderr
        assert "email.send" in replay.stdout
        assert store.relay_batch() == (2, 2)

        target = "tests.acceptance.named_queue_jobs:worker"
        work = run(backend, "worker", target, "--queues", ",".join(QUEUES), "--once", *ns)
        assert work.returncode == 0, work.stderr
        assert "Traceback" not in work.stderr
        for queue in QUEUES:
            assert store.queue(queue).stats() == alkstore.QueueStats(0, 0, 0, 0, None)

        refused = run(backend, "worker", target, "--queues", "email send", "--once", *ns)
        assert refused.returncode == 1
        assert refused.stderr.startswith("alkstore: no handler registered for queues")
        assert "Traceback" not in refused.stderr
