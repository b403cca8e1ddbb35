"""The pieces of docs/adr/0020 that need no database: the `pooler=` URL parameter, the
line that records a migration in the printed DDL, and the generated GRANTs."""

from __future__ import annotations

import pytest

import alkstore
from alkstore import _sql
from alkstore.postgres import _grants, _pool


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://h/db", ("postgresql://h/db", None)),
        ("postgresql://h/db?pooler=true", ("postgresql://h/db", True)),
        ("postgresql://h/db?pooler=1&sslmode=require", ("postgresql://h/db?sslmode=require", True)),
        (
            "postgresql://h/db?sslmode=require&pooler=OFF",
            ("postgresql://h/db?sslmode=require", False),
        ),
        (
            "postgresql://u:p@h:6432/db?application_name=a%20b&pooler=no",
            ("postgresql://u:p@h:6432/db?application_name=a+b", False),
        ),
    ],
)
def test_the_pooler_parameter_is_alkstores_own(url: str, expected: tuple[str, bool | None]) -> None:
    assert _pool.split_pooler(url) == expected


def test_a_pooler_parameter_that_is_not_a_yes_or_no_is_refused() -> None:
    with pytest.raises(alkstore.InvalidURL, match="pooler=true or pooler=false"):
        _pool.split_pooler("postgresql://h/db?pooler=maybe")


def test_the_printed_ddl_records_each_migration() -> None:
    pg = "INSERT INTO ns.schema_migrations (version, name) VALUES (%s, %s)"
    assert _sql.recorded(pg, 7, "roles_and_gaps") == (
        "INSERT INTO ns.schema_migrations (version, name) VALUES (7, 'roles_and_gaps');"
    )
    lite = "INSERT INTO ns__m (version, name, applied_at) VALUES (?, ?, unixepoch())"
    assert _sql.recorded(lite, 1, "event_log") == (
        "INSERT INTO ns__m (version, name, applied_at) VALUES (1, 'event_log', unixepoch());"
    )
    with pytest.raises(ValueError):
        _sql.recorded(pg, 1, "x'); DROP TABLE y; --")


def test_the_grants_name_each_part_and_nothing_else() -> None:
    text = _grants.grants("alk", "app", {"producer": "web", "reader": "ops"}, 7)
    statements = [line for line in text.splitlines() if line and not line.startswith("--")]
    assert statements == [
        'GRANT CONNECT ON DATABASE "app" TO web;',
        "GRANT USAGE ON SCHEMA alk TO web;",
        "GRANT SELECT ON TABLE alk.schema_migrations TO web;",
        "GRANT INSERT ON TABLE alk.events TO web;",
        "GRANT SELECT ON TABLE alk.queues TO web;",
        "GRANT SELECT, INSERT ON TABLE alk.jobs TO web;",
        "GRANT USAGE ON SEQUENCE alk.jobs_id_seq TO web;",
        'GRANT CONNECT ON DATABASE "app" TO ops;',
        "GRANT USAGE ON SCHEMA alk TO ops;",
        *(f"GRANT SELECT ON TABLE alk.{table} TO ops;" for table in _grants.TABLES),
        "GRANT EXECUTE ON FUNCTION alk.sequence_events(integer) TO ops;",
    ]
    admin = _grants.grants("alk", "app", {"admin": "owner"}, 7)
    assert "CREATE SCHEMA IF NOT EXISTS alk AUTHORIZATION owner;" in admin.splitlines()


def test_bad_roles_and_parts_are_refused() -> None:
    with pytest.raises(alkstore.InvalidName, match="producer role"):
        _grants.grants("alk", "app", {"producer": 'web"; DROP'}, 7)
    with pytest.raises(alkstore.InvalidArgument, match="unknown parts"):
        _grants.grants("alk", "app", {"janitor": "x"}, 7)
    with pytest.raises(alkstore.InvalidArgument, match="name at least one role"):
        _grants.grants("alk", "app", {}, 7)
    assert set(_grants.PRIVILEGES) | {"admin"} == set(_grants.PARTS)
    for part, tables in _grants.PRIVILEGES.items():
        assert set(tables) <= set(_grants.TABLES), part
