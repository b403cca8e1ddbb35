"""Named SQL in `.sql` files: `-- name: xyz` headers, loaded once per engine.

`{ns}` in a query is the namespace: a PostgreSQL schema or an SQLite table
prefix. `{now}` is the statement's time in epoch milliseconds: the `now` parameter
when the store has an injected clock (tests), else the database's own clock
(ADR 0012: every ownership decision uses the database's time). Such fragments
are defined once per engine as queries named `<name>_fragment` and fill `{<name>}`.
`{default_max_attempts}` is DEFAULT_MAX_ATTEMPTS below: the one value both engines'
queries and the Python code take a queue's default from (ADR 0006 addendum 2026-12-01).
Namespaces are validated identifiers (see `_config.check_name`), so the
substitution cannot inject SQL; that is why the results are typed LiteralString
(mypy treats LiteralString as str, so no cast is needed or possible here).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, LiteralString

from alkstore import _errors

Binder = Callable[[Mapping[str, Any]], tuple[Any, ...]]

DEFAULT_MAX_ATTEMPTS = 5  # a queue's max_attempts until `Queue.configure` stores one

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def _raw(package: str) -> dict[str, str]:
    """Every named query in the package's `sql/*.sql` files (names are unique)."""
    found: dict[str, str] = {}
    folder = resources.files(package).joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _HEADER.split(entry.read_text("utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice in {package}/sql")
            found[name] = body.strip()
    return found


@cache
def queries(package: str, ns: str) -> dict[str, LiteralString]:
    """The named queries of an engine package, with `{ns}`, `{now}` and the other
    fragments filled in (cached: do not mutate)."""
    raw = {name: _code(body) for name, body in _raw(package).items()}
    values = {"{default_max_attempts}": str(int(DEFAULT_MAX_ATTEMPTS))}
    fragments = {
        "{" + name.removesuffix("_fragment") + "}": body
        for name, body in raw.items()
        if name.endswith("_fragment")
    }

    def fill(body: str) -> str:
        while "{" in body and any(mark in body for mark in fragments):
            for mark, fragment in fragments.items():
                body = body.replace(mark, fragment)
        for mark, value in values.items():
            body = body.replace(mark, value)
        return body.replace("{ns}", ns)

    return {name: fill(body) for name, body in raw.items() if not name.endswith("_fragment")}


def _code(body: str) -> str:
    """A query without its comment lines: they stay in the .sql file. The database gets
    the statement alone, and psycopg keeps its parse of a query only up to 4,096
    characters (MAX_CACHED_STATEMENT_LENGTH): the claim with its comments was 4,261, parsed
    again on every run (~180 us of client CPU; docs/adr/0006, addendum of 2026-12-01).
    Nor the lines' indentation: apsw hashes and compares a statement's text on every run
    to find it in its cache (issue 13, item 3: ~1% of a `tx.enqueue` on SQLite)."""
    lines = (line.strip() for line in body.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--"))


def query_names(package: str) -> set[str]:
    return set(_raw(package))


def migrations(package: str, ns: str) -> list[tuple[int, str, LiteralString]]:
    """(version, name, DDL) of every `sql/migrations/NNNN_name.sql`, in order."""
    folder = resources.files(package).joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            ddl = entry.read_text("utf-8").replace("{ns}", ns)
            found.append((int(match[1]), match[2], ddl))
    return sorted(found)


def recorded(record: str, version: int, name: str) -> str:
    """`record` (an engine's `record_migration`, two placeholders: `%s` or `?`) with the
    migration's version and name written in: the line `alkstore sql` prints after each
    migration's DDL, so a database the DDL was applied to by hand knows it has it
    (docs/adr/0020). Names are `[a-z0-9_]+` (`migrations`): nothing to escape."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"not a migration name: {name!r}")
    values = iter((str(int(version)), f"'{name}'"))
    return re.sub(r"%s|\?", lambda _: next(values), record, count=2) + ";"


@cache
def latest_version(package: str) -> int:
    """The newest migration this alkstore knows for an engine package."""
    return migrations(package, "ns")[-1][0]


def check_version(package: str, found: int | None) -> None:
    """Refuse a schema a newer alkstore migrated (`found`: the newest version recorded in
    the database, None when it has none): this code cannot know what changed
    (docs/adr/0002, addendum 2026-12-01)."""
    latest = latest_version(package)
    if found is not None and found > latest:
        raise _errors.SchemaTooNew(found, latest)


def numbered(query: str, pattern: re.Pattern[str], mark: str) -> tuple[str, Binder | None]:
    """Named parameters -> numbered ones (`mark` + 1, 2, ...), and a binder that takes
    their values from a params dict, in number order (None: no parameter found).

    `pattern` captures a parameter's name in group 1; a match without group 1 (a
    string literal, a comment) is kept as it is. A repeated name keeps its number."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] is None:
            return match[0]
        if match[1] not in names:
            names.append(match[1])
        return f"{mark}{names.index(match[1]) + 1}"

    converted = pattern.sub(number, query)
    if not names:
        return query, None
    if len(names) == 1:
        only = names[0]
        return converted, lambda params: (params[only],)
    return converted, operator.itemgetter(*names)
