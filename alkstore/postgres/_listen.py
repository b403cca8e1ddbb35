"""The LISTEN thread of a PostgreSQL store: every notification on the namespace's channel
fires the store's Wake (ADR 0005).

LISTEN needs a session of its own for as long as it listens. Through a connection
pooler in transaction mode it has none: the pooler gives the session to other clients
between statements, and notifications never arrive. So LISTEN runs only on a direct
URL (`listen_url`; the store's own URL when it is not behind a pooler), and a store
behind a pooler without one says so once, at WARNING, with the fix (docs/adr/0020).

And when wakes do not arrive for a reason alkstore could not see (a pooler it did not
detect, a proxy that drops them), the thread finds out: after each LISTEN it sends a
NOTIFY of its own to the channel, through the store's URL (the path every NOTIFY
takes), and if that does not come back within PROBE_WAIT seconds it says so once, at
WARNING, with the fix. Consumers re-poll meanwhile, as always: nothing is lost, it is
only slower.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import LiteralString

import psycopg
import tenacity

from alkstore import _wake

log = logging.getLogger("alkstore.wake")
POLL = 0.25  # seconds: how often the thread checks for close()
PROBE_WAIT = 10.0  # seconds a LISTEN waits for the NOTIFY it sent itself
FIX = (
    "give alkstore a URL that reaches PostgreSQL directly for LISTEN: "
    "alkstore.connect(..., listen_url=...), `--listen-db` or $ALKSTORE_LISTEN_DB "
    "(docs/guide/postgresql-platform.md)"
)


class Listening:
    """The body of the LISTEN thread (`run`), until `closed` is set."""

    def __init__(
        self,
        conninfo: str | None,
        notify_conninfo: str,
        listen: LiteralString,
        probe: LiteralString,
        wake: _wake.Wake,
        closed: threading.Event,
    ) -> None:
        """`conninfo`: where to LISTEN (None: nowhere, the store is behind a pooler and
        has no direct URL); `notify_conninfo`: where the probe NOTIFY goes."""
        self._conninfo = conninfo
        self._notify_conninfo = notify_conninfo
        self._listen = listen
        self._probe = probe
        self._wake = wake
        self._closed = closed
        self.probe_answered: bool | None = None  # None: no probe sent yet
        self._warned = False

    def run(self) -> None:
        if self._conninfo is None:
            log.warning(
                "PostgreSQL LISTEN is off: this store reaches the database through a "
                "connection pooler, where LISTEN receives no notifications, so wakes never "
                "arrive and consumers re-poll instead (about once a second); %s",
                FIX,
            )
            return
        wait = tenacity.wait_random_exponential(multiplier=0.05, max=5)
        trouble = _wake.Trouble("PostgreSQL LISTEN")
        attempt = 0
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(self._listen)
                    attempt = 0
                    trouble.recovered()
                    self._wake.fire()  # anything may have happened while we were away
                    self._serve(conn)
            except psycopg.Error as exc:
                attempt += 1
                self._wake.fire()
                delay = wait(_retry_state(attempt))
                if not self._closed.is_set():
                    trouble.failed(
                        exc, f"reconnecting in {delay:.2f} s; consumers re-poll meanwhile"
                    )
                self._closed.wait(delay)

    def _serve(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        token = self._send_probe()
        sent = time.monotonic()
        while not self._closed.is_set():
            for notify in conn.notifies(timeout=POLL):
                if token is not None and notify.payload == token:
                    token = None
                    self.probe_answered = True
                self._wake.fire()
            if token is not None and time.monotonic() - sent > PROBE_WAIT:
                token = None
                self.probe_answered = False
                self._unanswered()

    def _send_probe(self) -> str | None:
        """NOTIFY our own channel with a unique payload, the way commits are announced;
        None if it could not be sent (then there is nothing to wait for)."""
        token = f"probe:{secrets.token_hex(8)}"
        try:
            with psycopg.connect(self._notify_conninfo, autocommit=True) as conn:
                conn.execute(self._probe, {"token": token}, prepare=False)
        except psycopg.Error as exc:
            log.debug("the LISTEN probe could not be sent: %s", exc)
            return None
        return token

    def _unanswered(self) -> None:
        if self._warned:
            return
        self._warned = True
        log.warning(
            "PostgreSQL LISTEN received no notification within %g s of a NOTIFY sent to "
            "it: wakes do not arrive, so consumers re-poll instead (about once a second). "
            "The LISTEN connection probably goes through a connection pooler in "
            "transaction mode; %s",
            PROBE_WAIT,
            FIX,
        )


def start(body: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=body, name="alkstore-pg-listen", daemon=True)
    thread.start()
    return thread


def _retry_state(attempt: int) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.attempt_number = attempt
    return state
