"""The command line tells what retention took (docs/adr/0020): `status` names the oldest
position left and each subscription's gap; a replay into pruned positions names them."""

from __future__ import annotations

from tests.acceptance.test_cli_edges import cli, on
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
