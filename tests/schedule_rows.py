"""Raw SQL on the schedules tables of a test's namespace, on either engine: what an
operator, a restored backup or an older alkstore may have left there."""

from __future__ import annotations

from typing import Any

from tests.conftest import Backend


def execute(backend: Backend, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run `sql` (`?` placeholders; `{schedules}` and `{firings}` name the tables),
    committed; its rows."""
    ns = backend.namespace
    if backend.name == "sqlite":
        tables = {"schedules": f"{ns}__schedules", "firings": f"{ns}__schedule_firings"}
    else:
        tables = {"schedules": f"{ns}.schedules", "firings": f"{ns}.schedule_firings"}
        sql = sql.replace("?", "%s")
    conn = backend.raw_connection()
    try:
        if backend.name == "sqlite":
            with conn:
                return [tuple(row) for row in conn.execute(sql.format(**tables), params)]
        with conn.transaction():
            cursor = conn.execute(sql.format(**tables), params)
            return [tuple(row) for row in cursor] if cursor.description else []
    finally:
        conn.close()
