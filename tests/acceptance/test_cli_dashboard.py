"""`alkstore dashboard` refuses what the other commands refuse, before it serves: one line
on stderr, exit 2 for a bad command line, 1 for a database that is not migrated
(docs/adr/0015, 0023). Serving is tests/acceptance/test_dashboard_browser.py's."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_cli import run


def test_a_bad_port_and_an_unmigrated_database_are_one_line_each(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'empty.db'}"
    bad = run("dashboard", "--db", db, "--port", "70000")
    assert bad.returncode == 2 and "must be a port number 0-65535" in bad.stderr
    empty = run("dashboard", "--db", db, "--port", "0")
    assert empty.returncode == 1 and empty.stdout == ""
    (line,) = empty.stderr.splitlines()
    assert line.startswith("alkstore: ") and "alkstore migrate" in line
