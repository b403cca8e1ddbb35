"""The path a new operator takes (issue 15, "done when"), as subprocesses on PostgreSQL.

The order example runs with metrics and traces on; /metrics is scraped while it runs
and its counters move; its spans link each order's HTTP request (where the event was
appended) to the handler that confirmed it. Then, with the command line only: the
dead letter it left shows in `status --json`, `dlq show` says why, the operator fixes
the address and requeues it, a worker acks it, and `status --json` shows no dead
letter left.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.test_examples import Place, environment, pg_place
from tests.conftest import Backend
from tests.faults.pg_cluster import free_port


@pytest.fixture
def place(pg_backend: Backend) -> Iterator[Place]:
    with pg_place(pg_backend) as found:
        yield found


def cli(cwd: Path, place: Place, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli", *args, *place.args],
        cwd=cwd, env=environment(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


def counter(text: str, name: str, queue: str) -> float:
    """The value of counter `name` for `queue` in a Prometheus text exposition (0: none)."""
    total = 0.0
    for match in re.finditer(rf"^{name}_total\{{([^}}]*)\}} (\S+)$", text, re.M):
        if f'queue="{queue}"' in match[1]:
            total += float(match[2])
    return total


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def queue_row(status: dict[str, Any], name: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [q for q in status["queues"] if q["name"] == name]
    assert len(rows) == 1, status["queues"]
    return rows[0]


def test_an_operator_sees_and_repairs_a_dead_letter(place: Place, tmp_path: Path) -> None:
    port = free_port()
    example = subprocess.Popen(
        [sys.executable, "-m", "examples.orders", *place.args,
         "--metrics-port", str(port), "--trace"],
        cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    scrapes: list[str] = []
    deadline = time.monotonic() + 60
    while example.poll() is None and time.monotonic() < deadline:
        if (text := scrape(port)) is not None:
            scrapes.append(text)
        time.sleep(0.1)
    out, _ = example.communicate(timeout=30)
    assert example.returncode == 0, out

    # /metrics during the run: the counters moved between the first scrape and the last
    assert len(scrapes) >= 2, out
    first, last = scrapes[0], scrapes[-1]
    assert counter(last, "alkstore_jobs_claimed", "confirmations") > counter(
        first, "alkstore_jobs_claimed", "confirmations"
    ), (first, last)
    assert counter(last, "alkstore_jobs_acked", "confirmations") >= 3, last
    assert counter(last, "alkstore_jobs_dead_lettered", "confirmations") == 1, last

    # one trace from the HTTP request that appended to the handler that ran
    spans = [
        m.groupdict()
        for m in re.finditer(
            r"^span '(?P<name>[^']+)' trace=(?P<trace>\w+) id=(?P<id>\w+) parent=(?P<parent>\S+)$",
            out,
            re.M,
        )
    ]
    requests = {s["id"]: s for s in spans if s["name"] == "POST /orders"}
    handlers = [s for s in spans if s["name"] == "process confirmations"]
    assert len(requests) == 5 and len(handlers) >= 4, out
    for span in handlers:
        parent = requests.get(span["parent"])
        assert parent is not None and parent["trace"] == span["trace"], span

    # the command line: the dead letter, why, the fix, the requeue, the ack
    status = json.loads(cli(tmp_path, place, "status", "--json").stdout)
    assert queue_row(status, "confirmations")["dead"] == 1, status
    (dead,) = json.loads(cli(tmp_path, place, "dlq", "list", "confirmations", "--json").stdout)
    shown = json.loads(cli(tmp_path, place, "dlq", "show", str(dead["id"]), "--json").stdout)
    assert "550 mailbox unavailable: alan@bounce.example" in shown["reason"], shown
    assert shown["attempts"] == 3, shown
    with psycopg.connect(place.url, autocommit=True) as conn:
        conn.execute("UPDATE orders SET email = 'alan@example.com' WHERE id = 3")
    requeued = cli(tmp_path, place, "dlq", "requeue", str(dead["id"]), "--json")
    assert json.loads(requeued.stdout)["requeued"] == 1, requeued.stdout
    worker = cli(tmp_path, place, "worker", "examples.orders.worker:worker", "--once")
    assert "sent to alan@example.com (attempt 1)" in worker.stderr, worker.stderr
    status = json.loads(cli(tmp_path, place, "status", "--json").stdout)
    row = queue_row(status, "confirmations")
    assert (row["ready"], row["scheduled"], row["running"], row["dead"]) == (0, 0, 0, 0), row
