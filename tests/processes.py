"""`alkstore` CLI subprocesses for the tests (acceptance and faults), run as a user runs them.

`python -m relay.cli <command> ...`, with `$ALKSTORE_DB` removed from the
environment (every test passes `--db`), and the output in a log file (never a
pipe: a full pipe would block the process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]


class CliProcess:
    """One CLI subprocess, its output in `log_path`."""

    started_marker: str | None = None
    """A log line that says the signal handlers are installed (see `terminate`)."""

    def __init__(
        self, kind: str, args: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.kind = kind
        self.log_path = log_path
        environ = {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"} | (env or {})
        self._log: IO[bytes] = open(log_path, "wb")  # closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "relay.cli", kind, *args],
            cwd=ROOT,
            env=environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def describe(self, lines: int = 20) -> str:
        tail = "\n".join(self.output().splitlines()[-lines:])
        return f"{self.kind} pid {self.pid} (exit {self.proc.poll()}), last output:\n{tail}"

    def kill(self) -> None:
        """SIGKILL (no clean-up at all) and reap."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM (a clean stop) and reap; the exit code.

        With a `started_marker`, waits for that line first: before it the signal
        handlers are not installed and SIGTERM ends the process with -15."""
        deadline = time.monotonic() + timeout
        while (
            self.started_marker is not None
            and self.proc.poll() is None
            and self.started_marker not in self.output()
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
        finally:
            self._log.close()
