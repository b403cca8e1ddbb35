"""A throwaway PostgreSQL cluster a test starts, restarts and crashes itself.

The shared server the other tests use is never restarted: fault tests that need
a PostgreSQL outage run `initdb` into a temporary directory and `pg_ctl` on a
free port of 127.0.0.1 (no other address; its unix socket inside that
directory; trust authentication; fsync off, since nothing here must survive a
power cut). Whatever happens, the context manager stops the cluster and deletes
the directory.

initdb and postgres refuse to run as root: as root, they run as the `postgres`
OS user (`runuser`), which owns the directory.

    with pg_cluster() as cluster:
        store = alkstore.connect(cluster.url)
        cluster.restart(mode="immediate", down=2.0)  # a crash, 2 s of outage
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import pytest

ShutdownMode = Literal["smart", "fast", "immediate"]
OS_USER = "postgres"  # who runs initdb and postgres when we are root
START_TIMEOUT = 60  # seconds pg_ctl waits for the server (crash recovery on a busy machine)
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
}


def find_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory ($ALKSTORE_TEST_PG_BIN wins)."""
    if env := os.environ.get("ALKSTORE_TEST_PG_BIN"):
        return Path(env)
    candidates = [
        Path(d)
        for d in glob.glob("/usr/lib/postgresql/*/bin")
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists()
    ]

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in path.parent.name.split(".") if p.isdigit())

    if candidates:
        return max(candidates, key=version)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found and shutil.which("initdb") else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Cluster:
    """One initdb'ed data directory and the server running on it."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.socket_dir = root / "sock"
        self.log_path = root / "postgres.log"
        self.port = free_port()
        self.restarts = 0
        user = pwd.getpwnam(OS_USER) if os.geteuid() == 0 else None
        self._prefix = ["runuser", "-u", OS_USER, "--"] if user else []
        self.socket_dir.mkdir()
        if user:
            for path in (root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [*self._prefix, str(self.bin_dir / program), *args],
            cwd=self.root,  # the postgres user may not read the caller's cwd
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}\n{self.log_tail()}"
            )
        return done.stdout

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "postgres log:\n" + "\n".join(text.splitlines()[-lines:])

    def init(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.socket_dir}'"}
        lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
        with open(self.data / "postgresql.conf", "a") as conf:  # root may write it
            conf.write(lines)

    def start(self) -> None:
        """Start the server and wait until it accepts connections (after crash recovery)."""
        for attempt in range(3):
            try:
                self._run(
                    "pg_ctl",
                    "start",
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log_path),
                    "-w",
                    "-t",
                    str(START_TIMEOUT),
                    "-o",
                    f"-p {self.port}",
                    timeout=START_TIMEOUT + 30,
                )
                return
            except RuntimeError:
                # the free port may have been taken meanwhile (only before first use)
                if attempt == 2 or self.restarts or "could not bind" not in self.log_tail():
                    raise
                self.port = free_port()

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """`immediate` is a crash: no checkpoint, clients cut at once, recovery at start."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "60")

    def restart(self, mode: ShutdownMode = "fast", down: float = 0.0) -> None:
        """Stop (`mode`), stay down for `down` seconds, start again on the same port."""
        self.stop(mode)
        time.sleep(down)
        self.restarts += 1
        self.start()

    def running(self) -> bool:
        done = subprocess.run(
            [*self._prefix, str(self.bin_dir / "pg_ctl"), "status", "-D", str(self.data)],
            cwd=self.root,
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def destroy(self) -> None:
        """Stop the server however it can be stopped; delete the directory."""
        try:
            if self.data.exists() and self.running():
                self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            self._kill_postmaster()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_postmaster(self) -> None:
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGKILL)  # its children exit when the postmaster dies
        except ProcessLookupError:
            pass


@contextmanager
def pg_cluster() -> Iterator[Cluster]:
    """A fresh cluster on a free port; stopped and deleted at exit. Skips (fails under
    CI=true) when no PostgreSQL binaries are installed."""
    bin_dir = find_bin()
    if bin_dir is None:
        reason = "no PostgreSQL server binaries (initdb, pg_ctl) found"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    cluster = Cluster(bin_dir, Path(tempfile.mkdtemp(prefix="alkstore-pg-")))
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
