"""Migrations: idempotent, safe from many processes at once, and the schema they build
matches the reviewed snapshot in tests/contract/schema/ (regenerate it with
ALKSTORE_UPDATE_SCHEMA=1 after adding a migration, and review the diff)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import apsw
import psycopg

import alkstore
from tests.conftest import Backend

SNAPSHOTS = Path(__file__).parent / "schema"


def describe(backend: Backend, namespace: str) -> str:
    """A normalised, engine-native description of everything in a namespace."""
    if backend.name == "sqlite":
        conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
        try:
            rows = conn.execute(
                "SELECT type, name, sql FROM sqlite_master"
                " WHERE substr(tbl_name, 1, length(?1)) = ?1 ORDER BY type, name",
                (f"{namespace}__",),
            ).fetchall()
        finally:
            conn.close()
        lines = [f"{t} {n}\n{s}" for t, n, s in rows if not str(n).startswith("sqlite_")]
    else:
        queries = [
            "SELECT table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable"
            " || ' default=' || coalesce(column_default, '') FROM information_schema.columns"
            " WHERE table_schema = %(ns)s ORDER BY table_name, ordinal_position",
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %(ns)s ORDER BY indexname",
            "SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE connamespace = %(ns)s::regnamespace ORDER BY conname",
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p"
            " WHERE pronamespace = %(ns)s::regnamespace ORDER BY proname",
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal"
            " ORDER BY c.relname, t.tgname",
        ]
        with psycopg.connect(backend.url) as pg:
            lines = [row[0] for q in queries for row in pg.execute(q, {"ns": namespace})]
    return "\n".join(lines).replace(namespace, "{ns}") + "\n"


def test_migrate_is_idempotent(backend: Backend) -> None:
    store = backend.connect()
    try:
        assert store.migrate() == list(range(1, 16))
        assert store.migrate() == []
        assert store.sql(pending_only=True).count("-- migration") == 0
    finally:
        store.close()


def test_replayed_migrations_match_the_schema_snapshot(
    store: alkstore.Store, backend: Backend
) -> None:
    actual = describe(backend, backend.namespace)
    assert "events" in actual and "schema_migrations" in actual
    snapshot = SNAPSHOTS / f"{backend.name}.txt"
    if os.environ.get("ALKSTORE_UPDATE_SCHEMA"):
        snapshot.write_text(actual)
    assert actual == snapshot.read_text()


def test_printed_ddl_builds_the_same_schema_as_migrate(
    store: alkstore.Store, backend: Backend
) -> None:
    other = f"{backend.namespace}_sql"
    ddl = alkstore.connect(backend.url, namespace=other)
    try:
        text = ddl.sql()
    finally:
        ddl.close()
    try:
        if backend.name == "sqlite":
            conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
            with conn:
                conn.execute(text)
            conn.close()
        else:
            with psycopg.connect(backend.url) as pg:
                pg.execute(text.encode())  # several statements: simple query protocol
        assert describe(backend, other) == describe(backend, backend.namespace)
    finally:
        Backend(backend.name, backend.url, other).drop()


def test_printed_ddl_applied_by_hand_leaves_nothing_to_migrate(backend: Backend) -> None:
    """The DBA path (docs/adr/0020): the DDL records its migrations, so `migrate` and the
    pending DDL agree with it afterwards."""
    store = backend.connect()
    try:
        text = store.sql()
        if backend.name == "sqlite":
            conn = apsw.Connection(backend.url.removeprefix("sqlite:///"))
            with conn:
                conn.execute(text)
            conn.close()
        else:
            with psycopg.connect(backend.url) as pg:
                pg.execute(text.encode())
        assert store.sql(pending_only=True) == ""
        store.check()
        assert store.migrate() == []
        with store.transaction() as tx:
            tx.append_many([])
    finally:
        store.close()


def _migrate_in_child(url: str, namespace: str, barrier: Any, results: Any) -> None:
    store = alkstore.connect(url, namespace=namespace)
    try:
        barrier.wait(timeout=30)
        results.put(store.migrate())
    except BaseException as exc:  # report, never hang the parent
        results.put(repr(exc))
    finally:
        store.close()


def test_concurrent_migrate_from_several_processes(backend: Backend) -> None:
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_migrate_in_child, args=(backend.url, backend.namespace, barrier, results)
        )
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    everything = str(list(range(1, 16)))
    assert sorted(map(str, outcomes)) == sorted([everything] + ["[]"] * (n - 1)), outcomes
    store = backend.connect()
    try:
        with store.transaction() as tx:
            tx.append_many([])
        assert store.log.head() == 0
        assert store.migrate() == []
    finally:
        store.close()
