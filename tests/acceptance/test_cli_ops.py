"""`alkstore queues`, `jobs` and `dlq` as an operator runs them (issue 15, docs/adr/0017):
subprocesses on both engines, --json on stdout, one-line errors, exit codes, bulk
operations that ask first and refuse to guess when nobody can answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

import alkstore
from relay import cli as relay_cli
from tests.acceptance.test_cli_edges import cli, on, one_line_error
from tests.conftest import Backend
from tests.events import OrderPlaced


def dead(q: alkstore.Queue, reasons: list[str], payload: object = "x") -> list[int]:
    ids = [q.enqueue(payload, max_attempts=1, priority=1000) for _ in reasons]
    jobs = {job.id: job for job in q.claim_many(len(reasons))}
    for job_id, reason in zip(ids, reasons, strict=True):
        jobs[job_id].fail(reason)
    return ids


def as_json(*args: str) -> Any:
    out = cli(*args, "--json")
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    return json.loads(out.stdout)


def test_queues_list_show_pause_resume(backend: Backend) -> None:
    with backend.migrated() as store:
        with store.transaction() as tx:
            tx.enqueue("audit", {"order": 1})  # a queue nothing declares
        store.subscribe("mail", ["order.*"])
        dead(store.queue("mail"), ["boom"])

        listed = as_json("queues", "list", *on(backend))
        assert [(q["name"], q["ready"], q["dead"], q["paused"]) for q in listed] == [
            ("audit", 1, 0, False),
            ("mail", 0, 1, False),
        ]
        shown = as_json("queues", "show", "mail", *on(backend))
        assert shown["subscription"] == ["order.*"] and shown["config"]["max_attempts"] == 5

        out = cli("queues", "pause", "audit", *on(backend))
        assert (out.returncode, out.stdout) == (0, "paused audit\n"), out.stderr
        assert store.queue("audit").claim() is None, "paused for this process too"
        assert as_json("queues", "show", "audit", *on(backend))["paused"] is True
        assert as_json("queues", "resume", "audit", *on(backend)) == {
            "queue": "audit",
            "paused": False,
        }
        job = store.queue("audit").claim()
        assert job is not None and job.payload == {"order": 1}


def test_jobs_get_list_cancel_retry(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("work")
        later = q.enqueue(OrderPlaced(order_id=1), delay=3600)
        running = q.enqueue("now", priority=5)
        assert q.claim() is not None

        listed = as_json("jobs", "list", "work", *on(backend))
        assert [(j["id"], j["state"]) for j in listed] == [
            (later, "scheduled"),
            (running, "running"),
        ]
        got = as_json("jobs", "get", str(later), *on(backend))
        # the subprocess has no OrderPlaced: the stored JSON, said to be raw
        assert got["payload_view"] == "raw" and got["payload"]["order_id"] == 1
        assert "test.order_placed" in got["payload_error"]
        decoded = as_json("jobs", "get", str(later), "--import", "tests.events", *on(backend))
        assert decoded["payload_view"] == "decoded" and decoded["payload"]["order_id"] == 1

        assert as_json("jobs", "retry", str(later), *on(backend))["state"] == "ready"
        assert q.get(later).state == "ready"  # type: ignore[union-attr]
        out = cli("jobs", "cancel", str(running), *on(backend))
        one_line_error(out, 1, f"cannot cancel job {running}: a worker is running it")
        assert "--force" in out.stderr
        out = cli("jobs", "cancel", str(running), "--force", *on(backend))
        assert (out.returncode, out.stdout) == (0, f"cancelled job {running} of work\n")


def test_jobs_cancel_by_dedupe_key(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("work")
        waiting = q.enqueue("later", delay=3600, dedupe_key="report-7")
        done = as_json("jobs", "cancel", "--queue", "work", "--key", "report-7", *on(backend))
        assert done == {"queue": "work", "dedupe_key": "report-7", "cancelled": True}
        assert q.get(waiting) is None
        out = cli("jobs", "cancel", "--queue", "work", "--key", "report-7", *on(backend))
        one_line_error(out, 1, "no live job with dedupe_key 'report-7' in queue 'work'")
        out = cli("jobs", "cancel", "--key", "report-7", *on(backend))
        assert out.returncode != 0 and "--queue and --key" in out.stderr


def test_dlq_list_show_and_requeue_by_filter(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("mail")
        timeouts = dead(q, ["smtp timeout", "smtp timeout"], OrderPlaced(order_id=2))
        (address,) = dead(q, ["bad address"])

        filtered = as_json(
            "dlq", "list", "mail", "--error", "time?out", "--since", "1h", *on(backend)
        )
        assert [d["id"] for d in filtered] == timeouts
        shown = as_json("dlq", "show", str(address), *on(backend))
        assert (shown["reason"], shown["state"], shown["payload"]) == ("bad address", "dead", "x")

        bulk = ["dlq", "requeue", "--all", "mail", "--error", "timeout", *on(backend)]
        refused = cli(*bulk)  # stdin is not a terminal, and no --yes
        one_line_error(refused, 2, "refused without --yes")
        assert "requeue 2 dead letters of queue 'mail' that match 'timeout'" in refused.stderr
        assert q.count_dead() == 3, "nothing done"

        done = cli(*bulk, "--yes", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"queue": "mail", "requeued": 2}
        assert "requeue 2 dead letters" in done.stderr, "it says what it does"
        assert as_json(*bulk, "--yes") == {"queue": "mail", "requeued": 0}, "again: nothing"
        assert sorted(j.id for j in q.jobs(state="ready")) == timeouts


def test_dlq_purge_by_ids_and_queues_purge(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("jobs")
        q.enqueue_many(list(range(3)))
        q.enqueue_many(list(range(2)), delay=3600)
        a, b = dead(q, ["boom", "boom"])
        assert q.requeue([a]) == 1

        out = cli("dlq", "purge", str(a), str(b), *on(backend))
        assert out.returncode == 1, "a was not a dead letter any more"
        assert out.stdout == "purged 1 dead letter\n"
        assert out.stderr == f"alkstore: not dead letters (any more): {a}\n"
        assert q.count_dead() == 0

        one_line_error(cli("queues", "purge", "jobs", *on(backend)), 2, "refused without --yes")
        args = ["queues", "purge", "jobs", "--yes", *on(backend)]
        out = cli(*args, "--state", "scheduled", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"queue": "jobs", "state": "scheduled", "purged": 2}
        assert out.stderr == "alkstore: purge 2 scheduled jobs of queue 'jobs'\n"
        info = q.info()
        assert (info.ready, info.scheduled) == (4, 0)


def test_usage_mistakes_are_one_line(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """In process: argument checking, the same on both engines."""
    with backend.migrated() as store:
        (dead_id,) = dead(store.queue("q"), ["boom"])
    for args, code, text in [
        (["dlq", "purge"], 2, "needs dead-letter ids or --all QUEUE"),
        (["dlq", "requeue", "5", "--all", "q"], 2, "ids or --all QUEUE, not both"),
        (["dlq", "requeue", "5", "--error", "x"], 2, "--since and --error select with --all"),
        (["jobs", "get", "999999"], 1, "no live job 999999"),
        (["jobs", "retry", str(dead_id)], 1, f"job {dead_id} is a dead letter"),
        (["dlq", "show", "999999"], 1, "no live job 999999"),
        (["queues", "show", "nope"], 1, "no queue 'nope'"),
    ]:
        assert relay_cli.main([*args, *on(backend)]) == code, args
        err = capsys.readouterr().err
        assert err.startswith("alkstore: ") and err.count("\n") == 1 and text in err, err
    with pytest.raises(SystemExit) as exit:
        relay_cli.main(["jobs", "get", "0", *on(backend)])
    assert exit.value.code == 2 and "must be an integer >= 1" in capsys.readouterr().err


def test_an_interrupted_bulk_requeue_says_how_far_it_got(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C after the first batch: exit 130, the batch done, the rest still dead, and the
    same command again finishes."""
    with backend.migrated() as store:
        q = store.queue("bulk")
        ids = q.enqueue_many(list(range(7)), max_attempts=1)
        for job in q.claim_many(7):
            job.fail("boom")
    requeue = alkstore.Queue.requeue

    def interrupted(self: alkstore.Queue, *args: Any, **kwargs: Any) -> int:
        report = kwargs["progress"]

        def stop(done: int) -> None:  # Ctrl-C as the first batch is reported
            report(done)
            raise KeyboardInterrupt

        return requeue(self, *args, **{**kwargs, "progress": stop})

    monkeypatch.setattr(alkstore.Queue, "requeue", interrupted)
    args = ["dlq", "requeue", "--all", "bulk", "--yes", "--batch", "3", *on(backend)]
    assert relay_cli.main(args) == 130
    assert "interrupted after 3 of 7 dead letters" in capsys.readouterr().err
    with backend.migrated() as store:
        q = store.queue("bulk")
        assert q.count_dead() == 4 and len(q.jobs()) == 3
        monkeypatch.setattr(alkstore.Queue, "requeue", requeue)
        assert relay_cli.main(args) == 0
        assert q.count_dead() == 0 and sorted(j.id for j in q.jobs()) == ids
