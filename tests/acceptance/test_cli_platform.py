"""The command line of docs/adr/0020: `status` names the oldest position left and each
subscription's gap, a replay into pruned positions names them; `sql --grants` prints the
GRANTs per part (PostgreSQL) and refuses what it cannot do in one line."""

from __future__ import annotations

from tests.acceptance.test_cli_edges import cli, on, one_line_error
from tests.clock import Clock
from tests.conftest import Backend
from tests.contract.test_log_edges import relay_all
from tests.contract.test_retention_gaps import pruned_log


def test_status_and_replay_name_the_pruned_positions(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        pruned_log(store, clock)  # 1-7 pruned, 8-9 left
        relay_all(store)
        store.subscribe("late", ["*"], start="beginning")
    out = cli("events", "replay", "--queue", "early", "--from", "3", *on(backend))
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == (
        "early: 2 events will be delivered again (positions 3-9; 3-7 pruned by retention)\n"
    )
    status = cli("status", *on(backend))
    assert (status.returncode, status.stderr) == (0, "")
    lines = status.stdout.splitlines()
    assert lines[:2] == ["log head: 9", "oldest retained position: 8 (1-7 pruned)"]
    gaps = [line.strip() for line in lines if line.startswith("    never had")]
    assert gaps == [
        "never had positions 3-7: pruned by retention before it asked",
        "never had positions 1-7: pruned by retention before it asked",
    ]


def test_sql_grants(backend: Backend) -> None:
    args = ["sql", "--grants", "--worker", "w", "--relay", "r", *on(backend)]
    out = cli(*args)
    if backend.name == "sqlite":
        one_line_error(out, 1, "GRANTs are PostgreSQL's: SQLite has no roles")
        return
    assert (out.returncode, out.stderr) == (0, "")
    ns = backend.namespace
    assert f"GRANT SELECT, UPDATE, DELETE ON TABLE {ns}.jobs TO w;" in out.stdout.splitlines()
    assert f"GRANT EXECUTE ON FUNCTION {ns}.sequence_events(integer) TO r;" in out.stdout


def test_sql_grants_usage_errors(backend: Backend) -> None:
    one_line_error(cli("sql", "--grants", *on(backend)), 2, "sql --grants needs a role")
    one_line_error(cli("sql", "--worker", "w", *on(backend)), 2, "--worker goes with sql --grants")
    wrong = "invalid worker role name" if backend.name == "postgres" else "SQLite has no roles"
    one_line_error(cli("sql", "--grants", "--worker", "W-1", *on(backend)), 1, wrong)
