"""Numbering `%(name)s` queries for libpq and encoding their values (postgres/_prepared)."""

from __future__ import annotations

import pytest

from alkstore import _sql
from alkstore.postgres import _engine, _prepared


def test_names_become_numbers_and_a_repeated_name_keeps_its_number() -> None:
    s = _prepared.Statement("q", "SELECT %(a)s, %(b)s::jsonb WHERE x = %(a)s OR y = %(c)s", "ns")
    assert s.name == b"_alkstore_q_ns"
    assert s.sql == b"SELECT $1, $2::jsonb WHERE x = $1 OR y = $3"
    assert s.values({"c": None, "b": "é", "a": -12, "unused": 1.5}) == [b"-12", "é".encode(), None]


def test_a_single_parameter_is_a_list_of_one() -> None:
    s = _prepared.Statement("q", "SELECT %(only)s", "ns")
    assert s.values({"only": 7}) == [b"7"]


@pytest.mark.parametrize("query", ["SELECT %s", "SELECT 1", "SELECT %(a)s %% 2"])
def test_anything_but_plain_named_parameters_is_refused_at_load(query: str) -> None:
    with pytest.raises(ValueError, match="not a plain"):
        _prepared.Statement("q", query, "ns")


@pytest.mark.parametrize("value", [1.5, True, b"raw", ["a"]])
def test_values_other_than_str_int_or_none_are_refused(value: object) -> None:
    s = _prepared.Statement("q", "SELECT %(a)s", "ns")
    with pytest.raises(TypeError, match="str, int or None"):
        s.values({"a": value})


def test_every_prepared_query_shipped_loads() -> None:
    queries = _sql.queries("alkstore.postgres", "some_namespace")
    for name in _engine.PREPARED:
        statement = _prepared.Statement(name, queries[name], "some_namespace")
        assert statement.sql.count(b"$1") >= 1
        assert b"some_namespace" in statement.sql
