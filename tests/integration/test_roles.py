"""alkstore as a platform team runs it (docs/adr/0020): a DBA applies the DDL by hand and
the GRANTs `alkstore sql --grants` generates, and each part runs as a role of its own,
with exactly those privileges: it does its real work, and is refused what it must not
do, in one clear line, at once.

Roles are cluster-wide on the shared server: each test makes its own, with unique
names, and drops them (and everything they own) after."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import alkstore
import relay
from alkstore.postgres import _grants
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("admin", "producer", "worker", "relay", "reader")
FAST = 5.0  # seconds: a refusal comes at once, never after retries


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def apply_sql(url: str, text: str) -> None:
    """As a DBA would: psql in one transaction, stopping at the first error."""
    psql = shutil.which("psql")
    if psql is None:  # the same, through psycopg (simple query protocol: several statements)
        with psycopg.connect(url) as conn:
            conn.execute(text.encode())
        return
    out = subprocess.run(
        [psql, "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-d", url],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr


@dataclass
class Platform:
    """One namespace, its roles (part -> role) and the URL each logs in with."""

    root_url: str
    namespace: str
    roles: dict[str, str]

    def url(self, part: str) -> str:
        params = conninfo.conninfo_to_dict(self.root_url)
        host, port = params.get("host") or "127.0.0.1", params.get("port") or 5432
        return f"postgresql://{self.roles[part]}@{host}:{port}/{params['dbname']}"

    def connect(self, part: str, **kwargs: Any) -> alkstore.Store:
        return alkstore.connect(self.url(part), namespace=self.namespace, **kwargs)


@pytest.fixture
def platform(pg_backend: Backend) -> Iterator[Platform]:
    """The DBA path: roles, the admin's schema (the admin part of the GRANTs), the DDL
    this database needs (`alkstore sql --pending`) applied by hand as the admin, then
    `alkstore sql --grants` applied by hand."""
    tag = uuid.uuid4().hex[:8]
    roles = {part: f"alk_{tag}_{part}" for part in PARTS}
    admin = psycopg.connect(pg_backend.url, autocommit=True)
    p = Platform(pg_backend.url, pg_backend.namespace, roles)
    try:
        for role in roles.values():
            admin.execute(f"CREATE ROLE {role} LOGIN")
        ns = pg_backend.namespace
        with alkstore.connect(pg_backend.url, namespace=ns) as root:
            apply_sql(pg_backend.url, root.grants(admin=roles["admin"]))
            apply_sql(p.url("admin"), root.sql(pending_only=True))
            apply_sql(pg_backend.url, root.grants(**{k: v for k, v in roles.items()}))
        yield p
    finally:
        for role in roles.values():
            admin.execute(f"DROP OWNED BY {role}")  # its schema and grants, in this database
            admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


def test_after_the_dba_applied_the_ddl_nothing_is_pending(platform: Platform) -> None:
    args = ["--db", platform.url("admin"), "--namespace", platform.namespace]
    out = cli("migrate", *args)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == f"migrated {platform.namespace}: nothing to do\n"
    out = cli("sql", "--pending", *args)
    assert out.stdout == f"-- namespace {platform.namespace} is up to date: nothing to migrate\n"
    with platform.connect("worker") as store:  # needs no CREATE privilege
        assert store.migrate() == []
        store.check()


def test_each_part_runs_its_real_operations(platform: Platform) -> None:
    clock = Clock()
    with (
        platform.connect("admin", clock=clock) as admin,
        platform.connect("producer", clock=clock) as producer,
        platform.connect("relay", clock=clock) as relayer,
        platform.connect("worker", clock=clock) as worker_store,
        platform.connect("reader", clock=clock) as reader,
    ):
        admin.subscribe("mail", ["test.*"], start="beginning", max_attempts=2)
        admin.queue("audit").configure(max_attempts=3)
        admin.schedules.add("tick", every="1h", event=OrderPlaced(order_id=0))

        for n in range(3):
            with producer.transaction() as tx:
                tx.append(OrderPlaced(order_id=n))
                tx.enqueue("audit", {"n": n})
        with producer.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=100 + n) for n in range(40)])  # COPY
        producer.queue("audit").enqueue({"n": 9}, delay=0, dedupe_key="nine")
        producer.queue("audit").enqueue_many([{"bulk": n} for n in range(40)])  # COPY

        # the reader numbers what committed since, without UPDATE on the log
        assert [e.position for e in reader.log.read(after=0, limit=3)] == [1, 2, 3]
        assert reader.log.head() == 43

        clock.advance(3_601)
        lease = relayer.lease("relay", ttl=3)
        assert lease.acquire()
        assert relayer.fire_schedules(lease) == 1
        made = covered = 0
        while True:
            jobs, step = relayer.relay_batch(lease, batch=10)
            made, covered = made + jobs, covered + step
            if not step:
                break
        assert (made, covered) == (44, 44)
        assert relayer.sweep().ran
        lease.release()

        worker = relay.Worker(worker_store, poll=0.05, maintenance_every=0.2)
        done: list[int] = []

        @worker.handler("mail")
        def mail(job: alkstore.Job[OrderPlaced]) -> None:
            if job.payload.order_id == 1:
                raise relay.Fail("no such customer")
            done.append(job.payload.order_id)

        @worker.handler("audit")
        def audit(job: alkstore.Job[Any]) -> None:
            if job.attempt == 1 and job.payload.get("n") == 2:
                raise RuntimeError("once")  # retried
            done.append(-1)

        worker.run(once=True)
        clock.advance(600)  # the retry's backoff
        worker.run(once=True)
        assert len(done) == 43 + 44  # mail: 44 jobs, one dead-lettered; audit: 44 jobs
        assert relayer.prune_log(older_than=60) == 44

        status = reader.status()
        assert status.head == 44 and [lag.events for lag in status.subscriptions] == [0]
        assert reader.queue("mail").stats().dead == 1
        assert [d.reason for d in reader.queue("mail").dead_letters()] == ["no such customer"]

        assert admin.queue("mail").requeue() == 1
        assert admin.replay("mail", 44).checkpoint == 43
        assert admin.unsubscribe("mail")

    out = cli("status", "--db", platform.url("reader"), "--namespace", platform.namespace)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert out.stdout.startswith("log head: 44")


def test_an_ordered_queue_runs_under_the_parts_roles(platform: Platform) -> None:
    """The ordered queue's key rows are written by definer functions (migrations 0008,
    0012): the relay's sorted key lock and the workers' promotion need no grant."""
    with (
        platform.connect("admin") as admin,
        platform.connect("producer") as producer,
        platform.connect("relay") as relayer,
        platform.connect("worker") as worker_store,
    ):
        admin.subscribe("seq", ["test.*"], start="beginning", ordered=True)
        with producer.transaction() as tx:
            for n in range(3):
                for key in ("b", "a"):
                    tx.append(OrderPlaced(order_id=n), key=key)
        assert relayer.relay_batch(None) == (6, 6)
        queue = worker_store.queue("seq")
        seen = []
        while jobs := queue.claim_many(10):
            seen.append(sorted((job.key, job.raw_payload["order_id"]) for job in jobs))
            assert queue.ack_many(jobs) == []
        assert seen == [[("a", n), ("b", n)] for n in range(3)]


def refused(call: Any, *texts: str) -> alkstore.PermissionDenied:
    start = time.monotonic()
    with pytest.raises(alkstore.PermissionDenied) as caught:
        call()
    assert time.monotonic() - start < FAST
    message = str(caught.value)
    assert "\n" not in message and "alkstore sql --grants" in message
    for text in texts:
        assert text in message, message
    return caught.value


def test_each_part_is_refused_what_it_must_not_do(platform: Platform) -> None:
    roles = platform.roles

    def append(store: alkstore.Store) -> None:
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))

    with platform.connect("producer") as producer:
        producer.queue("audit").enqueue({"n": 1})
        denied = refused(
            lambda: producer.queue("audit").claim(),
            "permission denied for table jobs",
            f"role {roles['producer']!r}",
            "in alkstore's `claim`",
        )
        assert denied.role == roles["producer"] and denied.operation == "claim"
        refused(lambda: producer.log.read(), "permission denied for table events")
        refused(lambda: producer.subscribe("x", ["*"]), "permission denied for table")
    with platform.connect("worker") as worker:
        refused(lambda: append(worker), "permission denied for table events")
        refused(lambda: worker.subscribe("x", ["*"]), "permission denied for table")
        refused(lambda: worker.queue("audit").enqueue({"n": 1}), "table jobs")
    with platform.connect("relay") as relayer:
        refused(lambda: relayer.subscribe("x", ["*"]), "permission denied for table")
        refused(lambda: relayer.queue("q").configure(max_attempts=2), "table queues")
        refused(
            lambda: relayer.schedules.add("x", every="1h", event=OrderPlaced(order_id=1)),
            "permission denied for table schedules",
        )
    with platform.connect("reader") as reader:
        assert reader.status().head == 0
        refused(lambda: append(reader), "permission denied for table events")
        refused(lambda: reader.queue("audit").claim(), "permission denied for table jobs")
    with platform.connect("admin") as admin:  # its namespace; not the database's
        assert admin.migrate() == []
        other = alkstore.connect(platform.url("admin"), namespace=f"{platform.namespace}_x")
        with other:
            refused(lambda: other.migrate(), "permission denied for database")


WORKER = "tests.acceptance.edge_worker:worker"


def test_processes_stop_at_once_with_one_line_when_a_privilege_is_missing(
    platform: Platform, tmp_path: Path
) -> None:
    with platform.connect("producer") as producer:
        producer.queue("edge").enqueue({"n": 1})
    ns = platform.namespace
    runs = {
        # the producer's role cannot claim: the drain ends instead of retrying
        "worker": ["worker", WORKER, "--once", "--db", platform.url("producer")],
        "worker (not --once)": ["worker", WORKER, "--db", platform.url("producer")],
        # the worker's role cannot take the relay's lease
        "relay": ["relay", "--db", platform.url("worker")],
        "scheduler": ["scheduler", "--db", platform.url("reader")],
    }
    os.environ["EDGE_DONE"] = str(tmp_path / "done")
    try:
        for name, args in runs.items():
            start = time.monotonic()
            out = cli(*args, "--namespace", ns, timeout=20)
            took = time.monotonic() - start
            assert out.returncode == 1, (name, out.stderr)
            last = out.stderr.strip().splitlines()[-1]
            assert last.startswith("alkstore: permission denied for table "), (name, out.stderr)
            assert "alkstore sql --grants" in last, (name, last)
            assert "Traceback" not in out.stderr, (name, out.stderr)
            assert "retrying" not in out.stderr, (name, out.stderr)
            assert took < 15, (name, took)
    finally:
        del os.environ["EDGE_DONE"]


def test_the_admin_migrates_a_schema_it_owns(platform: Platform, pg_backend: Backend) -> None:
    ns = f"{platform.namespace}_own"
    with psycopg.connect(pg_backend.url, autocommit=True) as root:
        root.execute(f"CREATE SCHEMA {ns} AUTHORIZATION {platform.roles['admin']}")
    out = cli("migrate", "--db", platform.url("admin"), "--namespace", ns)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.startswith(f"migrated {ns}: 0001, ")


def test_the_grants_cover_every_table_of_the_schema(pg_backend: Backend) -> None:
    """A migration that adds a table adds it to alkstore/postgres/_grants.py too."""
    with pg_backend.migrated(), psycopg.connect(pg_backend.url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (pg_backend.namespace,)
        ).fetchall()
    assert sorted(_grants.TABLES) == sorted(row[0] for row in rows)


def test_status_for_a_role_that_cannot_see_other_sessions(
    platform: Platform, pg_backend: Backend
) -> None:
    """Without pg_read_all_stats another role's session shows no start and no query:
    status counts it as not shown instead of failing."""
    with psycopg.connect(pg_backend.url) as other:  # the superuser: another role
        other.execute("CREATE TEMP TABLE holding (n int)")
        other.execute("INSERT INTO holding VALUES (1)")  # a writing transaction, left open
        with platform.connect("reader") as reader:
            status = reader.status()
            assert status.hidden_holdups >= 1
            assert other.info.backend_pid not in {h.pid for h in status.holdups}
        out = cli("status", "--db", platform.url("reader"), "--namespace", platform.namespace)
        other.rollback()
    assert (out.returncode, out.stderr) == (0, "")
    assert "(this role lacks pg_read_all_stats)" in out.stdout, out.stdout


def test_a_worker_refused_a_delete_stops_at_once(platform: Platform, pg_backend: Backend) -> None:
    """Without DELETE on jobs the claim still works, the sweep and the acks do not: the
    worker stops with the first refusal, without waiting out its grace period (a job it
    holds comes back when its lease ends)."""
    with psycopg.connect(pg_backend.url, autocommit=True) as root:
        root.execute(f"REVOKE DELETE ON {platform.namespace}.jobs FROM {platform.roles['worker']}")
    with platform.connect("producer") as producer:
        producer.queue("q").enqueue({"n": 1})
    with platform.connect("worker") as store:
        worker = relay.Worker(store, grace=30, maintenance_every=60)
        ran: list[int] = []
        worker.handler("q")(lambda job: ran.append(job.id))
        start = time.monotonic()
        with pytest.raises(alkstore.PermissionDenied, match="permission denied for table jobs"):
            worker.run(once=True)
        assert time.monotonic() - start < FAST
        assert len(ran) <= 1


def test_a_producer_role_cannot_replace_a_job(platform: Platform) -> None:
    """ADR 0022: on_duplicate="replace" updates a waiting job; the producer part has no
    UPDATE on jobs (it must not claim), so it is refused at once, and nothing changes."""
    with platform.connect("producer") as producer:
        audit = producer.queue("audit")
        audit.enqueue({"n": 1}, dedupe_key="k", delay=60)
        refused(
            lambda: audit.enqueue({"n": 2}, dedupe_key="k", on_duplicate="replace"),
            "permission denied for table jobs",
        )
        assert audit.enqueue({"n": 3}, dedupe_key="k", on_duplicate="ignore") is None
