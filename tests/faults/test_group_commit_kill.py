"""kill -9 while SQLite store transactions commit in groups (docs/adr/0028).

A process of 8 writer threads (tests/faults/group_writer.py) runs store transactions that
insert a row and enqueue a job each; some sleep inside the block, so the others wait for
the turn and the transactions that end meanwhile wait, handed on, for their group's
COMMIT. It is SIGKILLed at random moments, several times. After each kill: every
transaction whose `with` returned is in the database (a member returns only after its
group committed), none that raised is, every row has its job, and the file is intact.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

import alkstore

KILLS = 4
LINES_BEFORE_KILL = (200, 1500)  # finished transactions logged before the kill, at random


def read_log(log: Path) -> tuple[set[str], set[str]]:
    ok: set[str] = set()
    failed: set[str] = set()
    for line in log.read_text().splitlines():
        tag, name = line.split(" ", 1)
        (ok if tag == "ok" else failed).add(name)
    return ok, failed


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_9_during_group_commits_keeps_every_returned_transaction(
    tmp_path: Path, rng: random.Random
) -> None:
    path = tmp_path / "group.db"
    log = tmp_path / "writers.log"
    log.touch()
    with alkstore.connect(f"sqlite:///{path}") as store:
        store.migrate()
        with store.transaction() as tx:
            tx.connection.execute("CREATE TABLE rows (name TEXT PRIMARY KEY)")
    for round_ in range(KILLS):
        errors = tmp_path / f"writer{round_}.err"
        command = [sys.executable, "-m", "tests.faults.group_writer", str(path), str(log)]
        with errors.open("wb") as err:
            proc = subprocess.Popen([*command, str(round_)], stderr=err)
        try:
            target = len(log.read_text().splitlines()) + rng.randint(*LINES_BEFORE_KILL)
            deadline = time.monotonic() + 60
            while len(log.read_text().splitlines()) < target:
                assert proc.poll() is None, errors.read_text()
                assert time.monotonic() < deadline, "the writers made no progress"
                time.sleep(rng.uniform(0.001, 0.02))
        finally:
            proc.kill()
            proc.wait(10)
        ok, failed = read_log(log)
        conn = apsw.Connection(str(path))
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            rows = {name for (name,) in conn.execute("SELECT name FROM rows")}
            jobs = {
                payload
                for (payload,) in conn.execute(
                    "SELECT json_extract(payload, '$.name') FROM alkstore__jobs"
                )
            }
        finally:
            conn.close()
        assert ok <= rows, f"returned but not committed: {sorted(ok - rows)[:5]}"
        assert not failed & rows, f"raised but committed: {sorted(failed & rows)[:5]}"
        assert rows == jobs, "a row without its job, or a job without its row"
        assert len(ok) >= target - len(failed) - 8 * KILLS  # the writers did run
