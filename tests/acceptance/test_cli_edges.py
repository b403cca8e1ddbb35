"""The CLI's edges as a careless user meets them, run as subprocesses: every mistake ends
in one line on stderr and a non-zero exit, never a traceback or a hang; flags and the
environment agree; output streams; replay and status tell the truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import alkstore
from relay import cli as relay_cli
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.acceptance.edge_worker:worker"
UNREACHABLE = "postgresql://alkstore@127.0.0.1:1/nowhere"


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """`alkstore ARGS` with no ALKSTORE_* variables but those in `env`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=ROOT,
        env=environ | (env or {}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def on(backend: Backend) -> list[str]:
    return ["--db", backend.url, "--namespace", backend.namespace]


def one_line_error(out: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    """Exit `code`, nothing on stdout, one line on stderr that contains `text`."""
    assert (out.returncode, out.stdout) == (code, ""), out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("alkstore") and out.stderr.count("\n") == 1, out.stderr
    assert text in out.stderr, out.stderr


def append(store: alkstore.Store, n: int, first: int = 1) -> None:
    with store.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=i) for i in range(first, first + n)])


def relay_all(store: alkstore.Store) -> None:
    while store.relay_batch()[1]:
        pass


# -- case 1: replay never moves a checkpoint past the head ---------------------------------


def test_replay_past_the_head_is_refused_and_a_replay_says_what_it_redelivers(
    backend: Backend,
) -> None:
    with backend.migrated() as store:
        store.subscribe("emails", ["*"], start="beginning")
        append(store, 5)
        relay_all(store)
        out = cli("events", "replay", "--queue", "emails", "--from", "99999", *on(backend))
        one_line_error(out, 1, "from position 99999: the log head is 5")
        assert [s.checkpoint for s in store.subscriptions()] == [5]

        out = cli("events", "replay", "--queue", "emails", "--from", "2", *on(backend))
        assert (out.returncode, out.stderr) == (0, "")
        assert out.stdout == "emails: 4 events will be delivered again (positions 2-5)\n"
        out = cli("events", "replay", "--queue", "emails", "--from", "6", *on(backend))
        assert out.stdout == (
            "emails: checkpoint moved forward from 1 to 5: "
            "4 events not relayed yet will not be delivered\n"
        )


# -- case 9: numeric flags are checked before anything runs --------------------------------

BAD_NUMBERS = [
    (["relay", "--batch", "0"], "--batch"),
    (["relay", "--batch", "-3"], "--batch"),
    (["relay", "--lease-ttl", "0"], "--lease-ttl"),
    (["relay", "--lease-ttl", "nan"], "--lease-ttl"),
    (["relay", "--retention", "-1"], "--retention"),
    (["scheduler", "--lease-ttl", "-1"], "--lease-ttl"),
    (["worker", WORKER, "--once", "--concurrency", "0"], "--concurrency"),
    (["worker", WORKER, "--once", "--concurrency", "-5"], "--concurrency"),
    (["events", "tail", "--after", "-5"], "--after"),
    (["events", "tail", "--batch", "0"], "--batch"),
]


@pytest.mark.parametrize(("args", "flag"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS])
def test_bad_numbers_are_refused_in_one_line(tmp_path: Path, args: list[str], flag: str) -> None:
    url = f"sqlite:///{tmp_path / 'edge.db'}"
    with alkstore.connect(url) as store:
        store.migrate()
    env = {"EDGE_DONE": str(tmp_path / "done")}
    out = cli(*args, "--db", url, env=env, timeout=20)
    one_line_error(out, 2, f"argument {flag}:")
    with alkstore.connect(url) as store:
        assert store.lease("relay", 1).holder_info() is None, "the relay took the lease"


# -- case 10: the same startup for every process -----------------------------------------

PROCESSES = [
    ["relay"],
    ["scheduler"],
    ["worker", WORKER, "--once"],
    ["worker", WORKER],
    ["status"],
    ["events", "tail"],
    ["events", "replay", "--queue", "q", "--from", "1"],
    ["schedules", "list"],
]


@pytest.mark.parametrize("args", PROCESSES, ids=" ".join)
def test_every_command_refuses_an_unmigrated_database_in_one_line(
    backend: Backend, args: list[str], tmp_path: Path
) -> None:
    out = cli(*args, *on(backend), env={"EDGE_DONE": str(tmp_path / "done")}, timeout=20)
    one_line_error(out, 1, "alkstore's tables are missing or out of date")
    assert "run `alkstore migrate`" in out.stderr


@pytest.mark.parametrize("args", [*PROCESSES, ["migrate"], ["sql", "--pending"]], ids=" ".join)
def test_every_command_reports_an_unreachable_database_in_one_line(
    args: list[str], tmp_path: Path
) -> None:
    env = {"EDGE_DONE": str(tmp_path / "done")}
    out = cli(*args, "--db", UNREACHABLE, env=env, timeout=20)
    one_line_error(out, 2, "alkstore: cannot connect to PostgreSQL")


# -- case 11: no tracebacks for user mistakes ------------------------------------------------


@pytest.mark.parametrize("command", [["events", "tail"], ["status"]], ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path, command: list[str]) -> None:
    """`alkstore events tail | head`: the reader went away; exit as Unix tools do."""
    url = f"sqlite:///{tmp_path / 'edge.db'}"
    with alkstore.connect(url) as store:
        store.migrate()
        store.subscribe("q", ["*"])
        append(store, 3)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay.cli", *command, "--db", url],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes its first line
    with proc.stderr:
        stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141, stderr  # 128 + SIGPIPE, as a shell reports `yes`
    assert stderr == ""


@pytest.mark.parametrize("target", [":worker", "", "tests.acceptance.edge_worker:no-such"])
def test_a_bad_worker_target_is_one_line(tmp_path: Path, target: str) -> None:
    env = {"EDGE_DONE": str(tmp_path / "done")}
    out = cli("worker", target, "--db", f"sqlite:///{tmp_path / 'edge.db'}", env=env)
    one_line_error(out, 2, f"alkstore: cannot load worker {target!r}")


# -- case 13: flags and the environment agree ---------------------------------------------


def test_commands_take_the_database_and_namespace_from_the_environment(
    backend: Backend,
) -> None:
    with backend.migrated() as store:
        append(store, 2)
    env = {"ALKSTORE_DB": backend.url, "ALKSTORE_NAMESPACE": backend.namespace}
    out = cli("events", "tail", env=env)
    assert out.returncode == 0, out.stderr
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["1", "2"]
    # a flag wins over its variable
    elsewhere = {"ALKSTORE_DB": "sqlite:///no/such/dir.db", "ALKSTORE_NAMESPACE": "other"}
    out = cli("events", "tail", *on(backend), env=elsewhere)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2


def test_the_worker_keeps_the_environment_and_its_flags_win(
    backend: Backend, tmp_path: Path
) -> None:
    done = tmp_path / "done"
    with backend.migrated() as store:
        store.queue("edge").enqueue({"n": 1})
    env = {"ALKSTORE_DB": backend.url, "ALKSTORE_NAMESPACE": backend.namespace}
    out = cli("worker", WORKER, "--once", env=env | {"EDGE_DONE": str(done)})
    assert out.returncode == 0, out.stderr
    assert done.read_text() == '{"n": 1}\n'

    clash = {"EDGE_DONE": str(done), "EDGE_NAMESPACE": "other"}
    out = cli("worker", WORKER, "--once", *on(backend), env=clash)
    one_line_error(out, 2, f"--namespace {backend.namespace} but")
    assert "'other'" in out.stderr


def test_help_shows_the_effective_defaults() -> None:
    env = {"ALKSTORE_DB": "postgresql://app:s3cret@db/app", "ALKSTORE_NAMESPACE": "billing"}
    out = cli("status", "--help", env=env)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "postgresql://app:***@db/app (from $ALKSTORE_DB)" in text
    assert "billing (from $ALKSTORE_NAMESPACE)" in text
    assert "s3cret" not in text
    plain = " ".join(cli("worker", "--help").stdout.split())
    assert "sqlite:///alkstore.db" in plain and "default: alkstore" in plain


# -- case 14: events tail streams ----------------------------------------------------------


def test_events_tail_prints_every_event_in_order_page_by_page(backend: Backend) -> None:
    with backend.migrated() as store:
        for first in range(1, 61, 20):
            append(store, 20, first=first)
    out = cli("events", "tail", "--batch", "7", "--after", "2", *on(backend))
    assert out.returncode == 0, out.stderr
    assert [int(line.split("\t")[0]) for line in out.stdout.splitlines()] == list(range(3, 61))


def test_events_tail_reads_in_pages(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with backend.migrated() as store:
        append(store, 20)
    limits: list[int] = []
    read = alkstore.Log.read

    def spy(self: alkstore.Log, after: int = 0, limit: int = 100) -> Any:
        limits.append(limit)
        return read(self, after, limit)

    monkeypatch.setattr(alkstore.Log, "read", spy)
    assert relay_cli.main(["events", "tail", "--batch", "6", *on(backend)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 20
    assert limits == [6, 6, 6, 6]


# -- case 21: sql --pending and status tell the truth ------------------------------------


def test_sql_pending_on_an_up_to_date_database_prints_no_ddl(backend: Backend) -> None:
    with backend.migrated():
        pass
    out = cli("sql", "--pending", *on(backend))
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == f"-- namespace {backend.namespace} is up to date: nothing to migrate\n"


def test_status_after_a_replay_over_pruned_events(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        store.subscribe("q", ["*"], start="beginning")
        append(store, 7)
        relay_all(store)
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 7
        out = cli("events", "replay", "--queue", "q", "--from", "1", *on(backend))
        assert out.stdout == (
            "q: 0 events will be delivered again (positions 1-7, all pruned by retention)\n"
        )
        status = cli("status", *on(backend))
        assert status.returncode == 0, status.stderr
        assert re.search(r"  q: checkpoint 0, 0 events / caught up;", status.stdout), status.stdout


def test_status_shows_the_sequencing_backlog(pg_backend: Backend) -> None:
    import psycopg

    ns = pg_backend.namespace
    with pg_backend.migrated(), psycopg.connect(pg_backend.url) as app:
        with psycopg.connect(pg_backend.url) as other:
            alkstore.append(other, OrderPlaced(order_id=1), namespace=ns)
            other.commit()
        alkstore.append(app, OrderPlaced(order_id=2), namespace=ns)
        pid = app.info.backend_pid
        out = cli("status", *on(pg_backend))
        app.rollback()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "unsequenced: 1 committed event had no position yet (numbered now)" in lines
    assert any(
        line.startswith(f"oldest transaction holding unsequenced events: pid {pid}, ")
        and line.endswith("(its events get positions when it commits)")
        for line in lines
    ), out.stdout
