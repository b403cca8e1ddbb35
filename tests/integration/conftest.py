"""Fixtures of the PostgreSQL-only suites: a real PgBouncer in front of the test server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import pgbouncer
from tests.conftest import IN_CI


@pytest.fixture(scope="session")
def bouncer(pg_url: str) -> Iterator[pgbouncer.PgBouncer]:
    """PgBouncer in transaction mode in front of the session's test database (see
    tests/pgbouncer.py for its pools); skipped without the binary, except under CI."""
    if pgbouncer.binary() is None:
        reason = "pgbouncer is not installed (apt-get install pgbouncer)"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    process = pgbouncer.PgBouncer(pg_url)
    try:
        yield process
    finally:
        process.stop()
