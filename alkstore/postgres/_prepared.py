"""Hot autocommit statements run on libpq's prepared-statement calls, not psycopg's cursors.

A psycopg `execute` spends most of a one-row INSERT's client time in Python:
query conversion, parameter adaptation, the result's row maker. `q.enqueue`
is one such INSERT per transaction, so its statement is prepared once per
pooled connection and then costs one libpq Bind/Execute with the values as
text (docs/adr/0010, docs/performance.md). The SQL stays in `queues.sql` in
psycopg's `%(name)s` style; it is numbered (`$1`...) when the engine loads it,
and the server infers each parameter's type from where it stands, as it does
for psycopg's untyped strings.

Only statements whose values are str, int or None and whose results are
integer or text columns can run here: the values are sent as text and the
results read back as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import pq

from alkstore import _sql
from alkstore.postgres import _conn

_NAMED = re.compile(r"%\((\w+)\)s")
_INTEGERS = frozenset({20, 21, 23})  # int8, int2, int4
_TEXT = frozenset({25, 1043})  # text, varchar


def _number(value: object) -> bytes:
    if type(value) is int:
        return str(value).encode()
    raise TypeError(f"a prepared statement takes str, int or None, not {type(value).__name__}")


def _rows(result: pq.abc.PGresult) -> list[tuple[Any, ...]]:
    columns = range(result.nfields)
    kinds = [result.ftype(c) for c in columns]
    for kind in kinds:
        if kind not in _INTEGERS and kind not in _TEXT:
            raise TypeError(f"a prepared statement returns integers or text, not type oid {kind}")
    rows = []
    for r in range(result.ntuples):
        row: list[Any] = []
        for c in columns:
            raw = result.get_value(r, c)
            if raw is None:
                row.append(None)
            elif kinds[c] in _INTEGERS:
                row.append(int(raw))
            else:
                row.append(raw.decode())
        rows.append(tuple(row))
    return rows


class Statement:
    """One named query, numbered for libpq and prepared on each connection it runs on."""

    def __init__(self, name: str, query: str, namespace: str) -> None:
        self.name = f"_alkstore_{name}_{namespace}".encode()
        numbered, binder = _sql.numbered(query, _NAMED, "$")
        if "%" in numbered or binder is None:
            raise ValueError(f"query {name!r} is not a plain %(name)s query: {query!r}")
        self.sql = numbered.encode()
        self._bind = binder

    def values(self, params: Mapping[str, Any]) -> list[bytes | None]:
        return [
            None if v is None else v.encode() if type(v) is str else _number(v)
            for v in self._bind(params)
        ]

    def run(self, conn: _conn.Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return _rows(conn.run_prepared(self.name, self.sql, self.values(params)))

    def run_in(self, conn: _conn.Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Inside alkstore's transaction on `conn` (`conn.can_run_in`)."""
        return _rows(conn.run_prepared_in(self.name, self.sql, self.values(params)))


def statements(
    queries: Mapping[str, str], names: Sequence[str], namespace: str
) -> dict[str, Statement]:
    """The named queries that run prepared on libpq (only where libpq can close them)."""
    if not _conn.PIPELINED:
        return {}
    return {name: Statement(name, queries[name], namespace) for name in names}
