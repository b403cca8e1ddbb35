"""Relay, worker and scheduler recover on their own from PostgreSQL crashes (issue 12).

A throwaway cluster (tests/faults/pg_cluster.py: the shared server is never
restarted) serves three CLI processes, run as a user runs them: `alkstore relay`
(which also fires schedules, under its own lease), `alkstore scheduler` and
`alkstore worker tests.faults.restart_worker:worker`. A writer thread in the test
keeps appending events. PostgreSQL is crashed twice while everything runs
(`pg_ctl stop -m immediate`, down for 2 s, started again with crash recovery);
the test never restarts a process. A schedule fires every second with
catch_up="all".

The queue allows one attempt (max_attempts=1) with a 10 s visibility, well above
the outage: every handler succeeds, so any attempt past the first is the
outage's doing, and with one attempt allowed such a job is buried "lease
expired", which is what issue 12 item 7 says must not happen. The point is that
processes recover, not that leases survive outages of any length.

At the end:
- every event the writer saw commit is in the log once (and nothing it never tried);
- every logged event (writes and schedule firings) became exactly one job, and
  every job ran exactly once, on its first attempt, to the end, and was acked;
- there are no dead letters;
- the three processes are the ones started first, alive throughout, and exit 0 on
  SIGTERM;
- the schedule fired each boundary exactly once from the first to the last,
  during the outages (caught up) and after them.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

import alkstore
from tests.faults.pg_cluster import Cluster, pg_cluster
from tests.processes import CliProcess

NS = "pgrestart"
QUEUE = "work"  # restart_worker.QUEUE (importing that module would connect)
TARGET = "tests.faults.restart_worker:worker"
VISIBILITY = 10.0  # seconds: comfortably above an outage
DOWN = 2.0  # seconds the server stays down at each crash
CRASHES = 2
PHASE = 4.0  # seconds of normal running before, between and after the crashes
STARTUP = 60.0  # seconds for the processes to start working (busy machine)
RECOVERY = 30.0  # seconds after a restart for jobs and firings to flow again
DRAIN = 60.0  # seconds for the final drain (> VISIBILITY: a lost ack would show)
EVERY_MS = 1_000


class Order(alkstore.Event, tag="pgrestart.order"):
    seq: int


class Beat(alkstore.Event, tag="pgrestart.beat"):
    pass


# -- the writer ------------------------------------------------------------------------


@dataclass
class Written:
    """What the writer thread appended: committed, or unknown (the commit raised)."""

    committed: set[int] = field(default_factory=set)
    uncertain: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # StorageErrors (expected in outages)
    crashed: list[BaseException] = field(default_factory=list)  # anything else


def write_until(store: alkstore.Store, stop: threading.Event, out: Written) -> None:
    """1-3 events per transaction; a StorageError (the server is down) is noted, the
    writer waits 50 ms and goes on, as an application would."""
    rand = random.Random(12)
    seq = 0
    try:
        while not stop.is_set():
            ids = range(seq, seq + rand.randint(1, 3))
            seq = ids.stop
            try:
                with store.transaction() as tx:
                    for i in ids:
                        tx.append(Order(seq=i), key=f"k{i % 8}")
            except alkstore.StorageError as exc:
                out.uncertain.update(ids)
                out.errors.append(str(exc))
                stop.wait(0.05)
                continue
            out.committed.update(ids)
            stop.wait(rand.uniform(0, 0.03))
    except BaseException as exc:
        out.crashed.append(exc)


# -- the processes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One line of the worker's started/finished files."""

    pid: int
    job: int
    attempt: int
    position: int


def runs(path: Path) -> list[Run]:
    if not path.exists():
        return []
    return [Run(*map(int, line.split())) for line in path.read_text().splitlines() if line]


class Processes:
    """The relay, scheduler and worker subprocesses; all killed and reaped at the end."""

    def __init__(self, cluster: Cluster, tmp: Path) -> None:
        self.started_file = tmp / "started"
        self.finished_file = tmp / "finished"
        common = ["--db", cluster.url, "--namespace", NS]
        env = {"PG_RESTART_STARTED": str(self.started_file)}
        env["PG_RESTART_FINISHED"] = str(self.finished_file)
        self.relay = CliProcess("relay", [*common, "--lease-ttl", "3"], tmp / "relay.log")
        self.relay.started_marker = "relay starting"
        self.scheduler = CliProcess(
            "scheduler", [*common, "--lease-ttl", "3"], tmp / "scheduler.log"
        )
        self.scheduler.started_marker = "scheduler is active"
        self.worker = CliProcess("worker", [TARGET, *common], tmp / "worker.log", env)
        self.worker.started_marker = "worker started"
        self.all = [self.relay, self.scheduler, self.worker]

    def check_alive(self) -> None:
        for proc in self.all:
            assert proc.alive(), f"a process died:\n{proc.describe(40)}"

    def describe(self) -> str:
        return "\n\n".join(proc.describe(40) for proc in self.all)

    def watch(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_alive()
            time.sleep(0.1)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            self.check_alive()
            assert time.monotonic() < deadline, f"no {what} after {timeout} s\n{self.describe()}"
            time.sleep(0.1)

    def close(self) -> None:
        for proc in self.all:
            proc.close()


# -- reading the outcome -------------------------------------------------------------------


def read_log(store: alkstore.Store) -> list[alkstore.LogEntry]:
    entries: list[alkstore.LogEntry] = []
    while batch := store.log.read(after=entries[-1].position if entries else 0, limit=5_000):
        entries.extend(batch)
    return entries


def boundary_ms(entry: alkstore.LogEntry) -> int:
    return round(datetime.fromisoformat(entry.headers["alkstore-boundary"]).timestamp() * 1000)


def firings_after(store: alkstore.Store, when: float) -> int:
    """Schedule firings appended after `when` (epoch seconds)."""
    return sum(
        1
        for e in read_log(store)
        if e.type == "pgrestart.beat" and e.appended_at.timestamp() > when
    )


def settled(store: alkstore.Store) -> bool:
    """The relay covered the whole log and the queue has nothing ready, due or leased."""
    head = store.log.head()
    if any(s.checkpoint != head for s in store.subscriptions()):
        return False
    stats = store.queue(QUEUE).stats()
    return (stats.ready, stats.scheduled, stats.active) == (0, 0, 0)


# -- the test --------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_relay_worker_and_scheduler_recover_from_postgresql_crashes(tmp_path: Path) -> None:
    written = Written()
    stop_writing = threading.Event()
    outages: list[tuple[float, float]] = []  # (went down, came back), epoch seconds
    with ExitStack() as stack:
        cluster = stack.enter_context(pg_cluster())
        store = alkstore.connect(cluster.url, namespace=NS, connect_timeout=2)
        stack.callback(store.close)
        store.migrate()
        store.subscribe(
            QUEUE,
            ["pgrestart.*"],
            start="beginning",
            max_attempts=1,
            visibility=VISIBILITY,
        )
        beat = store.schedules.add("beat", every=EVERY_MS / 1000, event=Beat(), catch_up="all")

        procs = Processes(cluster, tmp_path)
        stack.callback(procs.close)
        writer = threading.Thread(
            target=write_until, args=(store, stop_writing, written), name="writer", daemon=True
        )
        writer.start()

        def stop_writer() -> None:
            stop_writing.set()
            writer.join(30)

        stack.callback(stop_writer)

        def finished() -> int:
            return len(runs(procs.finished_file))

        def more_finished(than: int) -> Callable[[], bool]:
            return lambda: finished() > than

        def fired_since(when: float) -> Callable[[], bool]:
            return lambda: firings_after(store, when) >= 2

        def logged(proc: CliProcess, line: str) -> Callable[[], bool]:
            return lambda: line in proc.output()

        procs.wait_for(more_finished(20), "finished jobs", STARTUP)
        procs.wait_for(logged(procs.relay, "relay is active"), "active relay", STARTUP)
        procs.wait_for(logged(procs.scheduler, "scheduler is active"), "scheduler", STARTUP)

        for _ in range(CRASHES):
            procs.watch(PHASE)
            down = time.time()
            cluster.restart("immediate", down=DOWN)
            up = time.time()
            outages.append((down, up))
            procs.wait_for(more_finished(finished() + 20), "jobs after a crash", RECOVERY)
            procs.wait_for(fired_since(up), "schedule firings after a crash", RECOVERY)
        procs.watch(PHASE)

        stop_writer()
        assert not writer.is_alive(), "the writer did not stop"
        store.schedules.pause("beat")
        time.sleep(0.5)  # a firing already under way lands now
        procs.wait_for(lambda: settled(store), "settled queue", DRAIN)
        procs.check_alive()  # recovered on their own: never restarted by the test
        codes = {proc.kind: proc.terminate() for proc in procs.all}
        worker_pid = procs.worker.pid
        logs = procs.describe()

        started, ended = runs(procs.started_file), runs(procs.finished_file)
        entries = read_log(store)
        dead = store.queue(QUEUE).dead_letters(limit=1_000)
        stats = store.queue(QUEUE).stats()

    problems = check(
        written, entries, started, ended, dead, stats, worker_pid, beat.next_fire_at, outages
    )
    if codes != {"relay": 0, "scheduler": 0, "worker": 0}:
        problems.append(f"- a process did not stop cleanly on SIGTERM: exit codes {codes}")
    assert not problems, "\n".join(["after the crashes:", *problems, "", logs])


def check(
    written: Written,
    entries: list[alkstore.LogEntry],
    started: list[Run],
    ended: list[Run],
    dead: list[alkstore.DeadLetter],
    stats: alkstore.QueueStats,
    worker_pid: int,
    first_boundary: int | None,
    outages: list[tuple[float, float]],
) -> list[str]:
    """Everything that went wrong (all of it, so one run tells the whole story)."""
    problems: list[str] = []

    def expect(ok: bool, message: str) -> None:
        if not ok:
            problems.append(f"- {message}")

    # the outages were real
    expect(not written.crashed, f"the writer died: {written.crashed!r}")
    expect(bool(written.errors), "the writer never saw the server down")

    # every committed event is in the log once
    orders = [e.payload.seq for e in entries if isinstance(e.payload, Order)]
    expect(len(orders) == len(set(orders)), "an event is in the log twice")
    lost = written.committed - set(orders)
    expect(not lost, f"{len(lost)} committed events are not in the log: {sorted(lost)[:20]}")
    strays = set(orders) - written.committed - written.uncertain
    expect(not strays, f"events in the log that were never appended: {sorted(strays)[:20]}")

    # nothing buried
    finished_jobs = {r.job for r in ended}
    expect(
        not dead,
        f"{len(dead)} jobs dead-lettered although no handler failed "
        f"({dict(Counter(d.reason for d in dead))}): "
        + "; ".join(
            f"job {d.id} (position {d.position}, attempts {d.attempts}/{d.max_attempts}, "
            f"its handler {'finished' if d.id in finished_jobs else 'never finished'})"
            for d in dead[:10]
        ),
    )
    expect(
        (stats.ready, stats.scheduled, stats.active) == (0, 0, 0),
        f"the queue is not empty: {stats}",
    )

    # one job per event, one run per job, on its first attempt, finished
    pids = {r.pid for r in started}
    expect(pids == {worker_pid}, f"jobs ran in processes {pids}, not only {worker_pid}")
    per_job = Counter(r.job for r in started)
    twice = {job: n for job, n in per_job.items() if n > 1}
    expect(not twice, f"{len(twice)} jobs ran more than once: {dict(list(twice.items())[:10])}")
    later = [r for r in started if r.attempt != 1]
    expect(not later, f"{len(later)} runs were not first attempts: {later[:10]}")
    unfinished = set(per_job) - finished_jobs
    expect(not unfinished, f"{len(unfinished)} runs never finished: {sorted(unfinished)[:10]}")
    jobs_of = Counter(r.position for r in started)
    duplicated = {pos: n for pos, n in jobs_of.items() if n > 1}
    expect(not duplicated, f"events that became more than one job: {duplicated}")
    positions = {e.position for e in entries}
    never = positions - set(jobs_of) - {d.position for d in dead}
    expect(not never, f"{len(never)} logged events never became a job: {sorted(never)[:20]}")

    # the schedule kept firing, once per boundary, and caught the outages up
    fired = [boundary_ms(e) for e in entries if e.type == "pgrestart.beat"]
    expect(bool(fired) and fired[0] == first_boundary, "the first boundary never fired")
    expect(len(fired) == len(set(fired)), "a boundary fired twice")
    missing = sorted(set(range(min(fired, default=0), max(fired, default=0) + 1, EVERY_MS)))
    missing = sorted(set(missing) - set(fired))
    expect(not missing, f"{len(missing)} boundaries never fired: {missing[:10]}")
    last_up = outages[-1][1] if outages else 0.0
    expect(
        max(fired, default=0) >= (last_up + PHASE - 1.5) * 1000,
        "the schedule stopped firing after the last outage",
    )
    for down, up in outages:
        expect(
            any(down * 1000 < b < up * 1000 for b in fired),
            f"no boundary of the outage {down:.1f}-{up:.1f} fired (catch-up)",
        )
    return problems
