"""Both engines satisfy one contract: checked statically by mypy, and their SQL files agree."""

from __future__ import annotations

import re
from pathlib import Path

import alkstore
import relay
from alkstore import _engine, _sql
from alkstore.postgres import PostgresEngine
from alkstore.sqlite import SqliteEngine

PACKAGES = ("alkstore.sqlite", "alkstore.postgres")
# Every named query exists in both engines' .sql files, but for these: each is used only
# by its own engine's module, for something the other engine does another way (the reason).
ENGINE_ONLY: dict[str, dict[str, str]] = {
    "alkstore.sqlite": {},
    "alkstore.postgres": {
        "append_event": "appends on libpq's prepared statements; SQLite runs insert_event",
        "copy_events": "many events in one COPY; SQLite runs insert_event with executemany",
        "bulk_id_before": "a bulk COPY's ids; SQLite's bulk_insert returns them",
        "bulk_id_after": "a bulk COPY's ids; SQLite's bulk_insert returns them",
        "bulk_ids": "a bulk COPY's ids; SQLite's bulk_insert returns them",
        "create_schema": "the namespace is a schema; on SQLite it is a table-name prefix",
        "migrations_table_exists": "to_regclass; SQLite reads sqlite_master (_table_exists)",
        "schema_state": "the namespace is a schema; on SQLite it is a table-name prefix",
        "lock_migrations": "an advisory lock; SQLite's BEGIN IMMEDIATE serialises migrate",
        "listen": "LISTEN/NOTIFY wakes; SQLite watches the database files (_watch.py)",
        "notify": "LISTEN/NOTIFY wakes; SQLite watches the database files (_watch.py)",
        "listen_probe": "LISTEN/NOTIFY wakes; SQLite watches the database files (_watch.py)",
        "session_probe": "a pooler between us and the server; SQLite has no server",
        "read_committed": "a session setting; SQLite's one writer needs no isolation level",
        "sequence_events": "commit-order positions (ADR 0004); SQLite's one writer needs none",
        "unsequenced": "commit-order positions (ADR 0004); SQLite's one writer needs none",
        "oldest_writers": "pg_stat_activity; SQLite has one writer and no such view",
        "hidden_writers": "pg_stat_activity; SQLite has one writer and no such view",
        "oldest_appender": "pg_locks on the events table (ADR 0004); SQLite has one writer",
        "sweep_try_lock": "an advisory lock; SQLite's sweep takes a lease row (lock_acquire)",
        "claim_ready_fragment": "the filters claim and claim_from share; SQLite's are short",
        "by_ids_fragment": "a batch's jobs by id, against a planner's trap SQLite has not",
    },
}
SHARED_MODULES = [
    *Path(alkstore.__file__).parent.glob("_*.py"),
    *Path(relay.__file__).parent.rglob("*.py"),
]


def as_engines(sqlite: SqliteEngine, postgres: PostgresEngine) -> list[_engine.Engine]:
    """mypy fails this function if either engine drifts from the Engine protocol."""
    return [sqlite, postgres]


def test_both_engines_define_the_same_queries() -> None:
    names = {package: _sql.query_names(package) for package in PACKAGES}
    for package, other in (PACKAGES, PACKAGES[::-1]):
        missing = names[package] - names[other] - ENGINE_ONLY[package].keys()
        assert not missing, f"{package} defines {sorted(missing)} and {other} does not"
        stale = ENGINE_ONLY[package].keys() - (names[package] - names[other])
        assert not stale, f"ENGINE_ONLY lists {sorted(stale)} for {package}: not engine-only"


def test_engine_only_queries_are_not_run_by_shared_code() -> None:
    """The code above the engines runs queries by name: only names both engines define."""
    only = {name for names in ENGINE_ONLY.values() for name in names}
    for module in SHARED_MODULES:
        text = module.read_text("utf-8")
        used = sorted(name for name in only if f'"{name}"' in text)
        assert not used, f"{module.name} runs engine-only queries {used}"


def test_both_engines_have_the_same_migration_versions() -> None:
    versions = {
        package: [(v, name) for v, name, _ in _sql.migrations(package, "ns")]
        for package in ("alkstore.sqlite", "alkstore.postgres")
    }
    assert versions["alkstore.sqlite"] == versions["alkstore.postgres"]
    assert versions["alkstore.sqlite"][0] == (1, "event_log")


def test_namespace_is_substituted_everywhere() -> None:
    for package in ("alkstore.sqlite", "alkstore.postgres"):
        for name, query in _sql.queries(package, "myns").items():
            assert "{ns}" not in query, (package, name)
            assert not re.findall(r"\{[a-z_]+\}", query), f"{package} {name}: a mark left"
        for _, _, ddl in _sql.migrations(package, "myns"):
            assert "{ns}" not in ddl and "myns" in ddl


def test_memory_engine_is_an_engine() -> None:
    engine: _engine.Engine = SqliteEngine(":memory:", "seam")
    try:
        assert engine.migrate() == list(range(1, 16))
        assert engine.head() == 0
    finally:
        engine.close()


def test_every_query_fits_psycopgs_cache_of_parsed_queries() -> None:
    """psycopg parses a query with named placeholders again on every run when it is longer
    than MAX_CACHED_STATEMENT_LENGTH (4,096): the claim was, with its comments (~180 us of
    client CPU a claim). Comment lines stay in the .sql files (alkstore/_sql.py)."""
    from psycopg import _queries

    for package in PACKAGES:
        for name, query in _sql.queries(package, "a_long_namespace_name").items():
            assert len(query) <= _queries.MAX_CACHED_STATEMENT_LENGTH, (package, name)
            assert "\n--" not in query and not query.startswith("--"), (package, name)
