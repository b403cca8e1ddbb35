"""The README's quick start runs as written, and its set-up commands are the ones CI runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, re.DOTALL)


def test_readme_python_blocks_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    blocks = _blocks("python")
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one() -> None:
    commands = [b.strip() for b in _blocks("sh")]
    assert commands == [
        "pip install -e . && python examples/quickstart.py",
        "pip install -e '.[test]' && python -m pytest",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_quickstart_example_runs_on_the_embedded_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"}
    script = str(ROOT / "examples" / "quickstart.py")
    first = subprocess.run(
        [sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    second = subprocess.run(
        [sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert first.stdout.startswith("emails: order 1 confirmed (999 cents), event position 1")
    assert second.stdout.startswith("emails: order 2 confirmed (999 cents), event position 2")
    assert (tmp_path / "alkstore.db").exists()
