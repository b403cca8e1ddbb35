"""Both engines satisfy one contract: checked statically by mypy, and their SQL files agree."""

from __future__ import annotations

from alkstore import _engine, _sql
from alkstore.postgres import PostgresEngine
from alkstore.sqlite import SqliteEngine

SHARED_QUERIES = {
    "create_migrations_table",
    "applied_versions",
    "record_migration",
    "insert_event",
    "read_events",
    "head",
}


def as_engines(sqlite: SqliteEngine, postgres: PostgresEngine) -> list[_engine.Engine]:
    """mypy fails this function if either engine drifts from the Engine protocol."""
    return [sqlite, postgres]


def test_both_engines_define_the_shared_queries() -> None:
    for package in ("alkstore.sqlite", "alkstore.postgres"):
        assert SHARED_QUERIES <= _sql.query_names(package), package


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
        for _, _, ddl in _sql.migrations(package, "myns"):
            assert "{ns}" not in ddl and "myns" in ddl


def test_memory_engine_is_an_engine() -> None:
    engine: _engine.Engine = SqliteEngine(":memory:", "seam")
    try:
        assert engine.migrate() == [1, 2, 3, 4, 5]
        assert engine.head() == 0
    finally:
        engine.close()
