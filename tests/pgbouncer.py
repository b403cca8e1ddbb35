"""A real PgBouncer (Debian's `pgbouncer` package) in front of the test server, in
transaction pooling mode, on a free port, in a temporary directory of its own.

Pools (databases in PgBouncer's terms), all on the session's test database:
- the database's own name: 4 server connections handed out round robin, so a
  statement that depends on its session (a prepared statement, a SET) meets another
  server connection soon;
- `single`: one server connection, shared by every client in turn: a session setting
  one client leaves behind is what the next client gets;
- `probe`: the same, for a test that LISTENs through the pooler on purpose (the LISTEN
  stays on that server connection).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import conninfo

CANDIDATES = ("pgbouncer", "/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
START_WAIT = 10.0  # seconds


def binary() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """One PgBouncer process; `url(pool)` connects through it, `stop()` ends it."""

    def __init__(self, server_url: str, extra_pools: dict[str, str] | None = None) -> None:
        exe = binary()
        if exe is None:
            raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
        params = conninfo.conninfo_to_dict(server_url)
        self.user = str(params.get("user") or os.environ.get("USER") or "postgres")
        self.dbname = str(params["dbname"])
        host = params.get("host") or "127.0.0.1"
        server = f"host={host} port={params.get('port') or 5432} dbname={self.dbname}"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="alkstore-pgbouncer-"))
        pools = {
            self.dbname: f"{server} pool_size=4",
            "single": f"{server} pool_size=1",
            "probe": f"{server} pool_size=1",
            **{name: f"{server} {extra}" for name, extra in (extra_pools or {}).items()},
        }
        lines = ["[databases]", *(f"{name} = {spec}" for name, spec in pools.items())]
        lines += [
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.dir / 'users.txt'}",
            "pool_mode = transaction",
            "server_round_robin = 1",
            "max_client_conn = 500",
            "query_wait_timeout = 15",  # a starved pool fails a test instead of hanging it
            f"logfile = {self.dir / 'pgbouncer.log'}",
            f"pidfile = {self.dir / 'pgbouncer.pid'}",
        ]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: it switches to this user
            lines.append("user = postgres")
        (self.dir / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        if os.geteuid() == 0:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres")
        self.process = subprocess.Popen(
            [exe, str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._wait_ready()

    def url(self, pool: str | None = None) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{pool or self.dbname}"

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_WAIT
        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"pgbouncer exited: {err or self.log()}")
            try:
                with psycopg.connect(self.url(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
