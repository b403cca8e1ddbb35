"""SQLite queries are bound positionally: `:name` -> `?N` at load time (sqlite/_engine.py)."""

from __future__ import annotations

import apsw
import pytest

from alkstore import _sql
from alkstore.sqlite._seam import _NAMED, positional


def test_repeated_names_share_one_number_and_the_binder_follows_first_use() -> None:
    query, bind = positional(
        "SELECT :b, :a, coalesce(:b, 0), ':x''s :y' -- don't :z\nFROM t WHERE a = :a"
    )
    assert query == "SELECT ?1, ?2, coalesce(?1, 0), ':x''s :y' -- don't :z\nFROM t WHERE a = ?2"
    assert bind is not None
    assert bind({"a": 1, "b": 2, "unused": 3}) == (2, 1)


def test_a_single_name_binds_a_one_tuple() -> None:
    query, bind = positional("SELECT :only")
    assert query == "SELECT ?1"
    assert bind is not None
    assert bind({"only": 7}) == (7,)


@pytest.mark.parametrize(
    "query",
    ["SELECT 1", "SELECT ?, ?", "UPDATE t SET a = :a; DELETE FROM t WHERE b = :b"],
)
def test_unnamed_queries_and_scripts_are_left_alone(query: str) -> None:
    assert positional(query) == (query, None)


def test_a_semicolon_in_a_comment_or_a_literal_does_not_make_a_script() -> None:
    """The claim's comments have semicolons: it was bound by name, the slow way, until
    issue 13 found it."""
    query, bind = positional("-- a; b\nSELECT ';', :a -- c; :d\n")
    assert query == "-- a; b\nSELECT ';', ?1 -- c; :d\n"
    assert bind is not None
    assert bind({"a": 1}) == (1,)
    assert positional("-- only :a comment; here\nSELECT 1") == (
        "-- only :a comment; here\nSELECT 1",
        None,
    )


def test_a_missing_parameter_is_a_key_error_as_with_apsw_dict_binding() -> None:
    _, bind = positional("SELECT :a, :b")
    assert bind is not None
    with pytest.raises(KeyError):
        bind({"a": 1})


def test_every_shipped_query_compiles_with_its_positional_values() -> None:
    """EXPLAIN compiles each converted query bound with the binder's tuple: the number of
    values matches, and no `:name` is left outside string literals."""
    conn = apsw.Connection(":memory:")
    for _, _, ddl in _sql.migrations("alkstore.sqlite", "ns"):
        conn.execute(ddl)
    converted_any = False
    for name, query in _sql.queries("alkstore.sqlite", "ns").items():
        converted, bind = positional(query)
        if bind is None:
            continue
        converted_any = True
        names = {m[1] for m in _NAMED.finditer(query) if m[1]}
        values = bind(dict.fromkeys(names, 1))
        assert len(values) == len(names), name
        assert not [m for m in _NAMED.finditer(converted) if m[1]], name
        conn.execute("EXPLAIN " + converted, values).fetchall()
    assert converted_any
