"""`--metrics-port` on the running commands (docs/adr/0019): the relay and a worker, run
as a user runs them, serve Prometheus metrics that move while events flow through."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.metrics_support import Samples, scrape, value
from tests.processes import ROOT, CliProcess

STARTUP = 30.0  # seconds a process may take to serve its metrics (a busy machine)
EVENTS = 20


class Serving(CliProcess):
    started_marker = "metrics on http://"

    def metrics_url(self) -> str:
        deadline = time.monotonic() + STARTUP
        while True:
            found = re.search(r"metrics on (http://\S+)", self.output())
            if found:
                return found.group(1)
            assert self.alive() and time.monotonic() < deadline, self.describe()
            time.sleep(0.05)


def scrape_until(url: str, check: object, process: CliProcess) -> Samples:
    deadline = time.monotonic() + STARTUP
    while True:
        samples = scrape(url)
        if check(samples):  # type: ignore[operator]
            return samples
        assert process.alive() and time.monotonic() < deadline, process.describe()
        time.sleep(0.05)


def test_the_relay_and_a_worker_serve_metrics_that_move(backend: Backend, tmp_path: Path) -> None:
    common = ["--db", backend.url, "--namespace", backend.namespace, "--metrics-port", "0"]
    ns = {"namespace": backend.namespace}
    with backend.migrated() as store:
        store.subscribe("metered", ["test.*"], start="beginning")
        relay = Serving("relay", common, tmp_path / "relay.log")
        worker = Serving(
            "worker", ["tests.acceptance.metrics_worker:worker", *common, "-v"], tmp_path / "w.log"
        )
        try:
            relay_url, worker_url = relay.metrics_url(), worker.metrics_url()
            before = scrape(worker_url)
            with store.transaction() as tx:
                for i in range(EVENTS):
                    tx.append(OrderPlaced(order_id=i))
            after = scrape_until(
                worker_url,
                lambda s: value(s, "alkstore_jobs_acked_total", queue="metered", **ns) == EVENTS,
                worker,
            )
            relayed = scrape_until(
                relay_url,
                lambda s: value(s, "alkstore_events_relayed_total", **ns) == EVENTS,
                relay,
            )
            assert relay.terminate() == 0 and worker.terminate() == 0
        finally:
            relay.close()
            worker.close()
    assert value(before, "alkstore_jobs_acked_total", queue="metered", **ns) in (None, 0)
    assert value(after, "alkstore_jobs_claimed_total", queue="metered", **ns) == EVENTS
    assert value(after, "alkstore_handler_duration_seconds_count", queue="metered", **ns) == EVENTS
    assert value(relayed, "alkstore_relay_jobs_created_total", **ns) == EVENTS
    assert value(relayed, "alkstore_leader", role="relay", **ns) == 1
    assert ("process_cpu_seconds_total", frozenset()) in relayed  # the default collectors
    worker_log, relay_log = worker.output(), relay.output()
    assert re.search(r"alkstore\.worker DEBUG job metered#\d+: ack", worker_log)  # -v
    assert " DEBUG " not in relay_log  # quiet by default
    assert "Traceback" not in worker_log + relay_log


def test_a_port_in_use_or_out_of_range_is_one_line_and_exit_2(backend: Backend) -> None:
    with backend.migrated(), socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for value_, message in (
            (str(port), f"cannot serve metrics on 0.0.0.0:{port}"),
            ("70000", "--metrics-port: must be a port number 0-65535, got '70000'"),
        ):
            out = subprocess.run(
                [sys.executable, "-m", "relay.cli", "scheduler", "--db", backend.url,
                 "--namespace", backend.namespace, "--metrics-port", value_],
                cwd=ROOT, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert out.returncode == 2, out.stderr
            last = out.stderr.strip().splitlines()[-1]
            assert last.startswith("alkstore: ") and message in last, out.stderr
            assert "Traceback" not in out.stderr
