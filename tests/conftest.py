"""Fixtures shared by every suite: one contract, two engines.

PostgreSQL: one database per test session (`alkstore_test_<random>`), one fresh
schema (namespace) per test, all dropped at the end. With no server reachable
the PostgreSQL half is skipped with a one-line reason, except under CI=true,
where it is a failure.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest

import alkstore

PG_ADMIN_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://root@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _with_db(url: str, dbname: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{dbname}"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A throwaway database for this test session."""
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}".splitlines()[0]
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    name = f"alkstore_test_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_db(PG_ADMIN_URL, name)
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@dataclass
class Backend:
    """Where a test's store lives: engine name, URL and a fresh namespace."""

    name: str
    url: str
    namespace: str
    files: tuple[Path, ...] = ()  # a scratch SQLite database's files (remove() deletes them)

    def scratch(self, directory: Path, prefix: str) -> Backend:
        """A fresh namespace on this engine, for one state-machine run: on SQLite a
        database file of its own in `directory`, on PostgreSQL a schema; `remove()`."""
        namespace = f"{prefix}_{uuid.uuid4().hex[:12]}"
        if self.name == "postgres":
            return Backend("postgres", self.url, namespace)
        path = directory / f"{namespace}.db"
        files = (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
        return Backend("sqlite", f"sqlite:///{path}", namespace, files)

    def remove(self) -> None:
        """Drop the namespace and delete a scratch database's files."""
        try:
            self.drop()
        finally:
            for path in self.files:
                path.unlink(missing_ok=True)

    def connect(self, **kwargs: Any) -> alkstore.Store:
        return alkstore.connect(self.url, namespace=self.namespace, **kwargs)

    @contextmanager
    def migrated(self, **kwargs: Any) -> Iterator[alkstore.Store]:
        """A migrated store on this namespace (`connect` arguments), closed at exit."""
        store = self.connect(**kwargs)
        try:
            store.migrate()
            yield store
        finally:
            store.close()

    def raw_connection(self) -> Any:
        """A connection the application owns (apsw or psycopg, not autocommit). On SQLite
        it waits up to 5 s for the write lock, as an application's connection beside a
        running worker must (a bare apsw connection fails at once: "database is locked")."""
        if self.name == "sqlite":
            conn = apsw.Connection(self.url.removeprefix("sqlite:///"))
            conn.set_busy_timeout(5000)
            return conn
        return psycopg.connect(self.url)

    def drop(self) -> None:
        if self.name == "postgres":
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {self.namespace} CASCADE")


def _namespace() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", f"sqlite:///{tmp_path / 'test.db'}", _namespace())
        return
    url = request.getfixturevalue("pg_url")
    b = Backend("postgres", url, _namespace())
    try:
        yield b
    finally:
        b.drop()


@pytest.fixture
def pg_backend(pg_url: str) -> Iterator[Backend]:
    b = Backend("postgres", pg_url, _namespace())
    try:
        yield b
    finally:
        b.drop()


@pytest.fixture
def store(backend: Backend) -> Iterator[alkstore.Store]:
    """A migrated store on a fresh namespace, closed after the test."""
    with backend.migrated() as s:
        yield s


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded random source; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("ALKSTORE_TEST_SEED", random.randrange(2**32)))
    print(f"{request.node.nodeid}: ALKSTORE_TEST_SEED={seed}")
    return random.Random(seed)
