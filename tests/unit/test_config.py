"""URLs and names are checked before anything touches a database."""

from __future__ import annotations

import pytest

import alkstore
from alkstore import _config


@pytest.mark.parametrize(
    ("url", "engine", "path"),
    [
        ("sqlite:///app.db", "sqlite", "app.db"),
        ("sqlite:////var/data/app.db", "sqlite", "/var/data/app.db"),
        ("sqlite:///:memory:", "sqlite", ":memory:"),
        ("SQLITE:///x.db", "sqlite", "x.db"),
        ("postgresql://user@localhost:5432/app", "postgres", ""),
        ("postgres://localhost/app", "postgres", ""),
    ],
)
def test_good_urls(url: str, engine: str, path: str) -> None:
    target = _config.parse_url(url)
    assert (target.engine, target.path) == (engine, path)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "app.db",
        "mysql://localhost/app",
        "sqlite://app.db",
        "sqlite:///",
        "sqlite:///app.db?mode=ro",
        "postgresql://localhost:notaport/app",
    ],
)
def test_bad_urls_raise_invalid_url(url: str) -> None:
    with pytest.raises(alkstore.InvalidURL) as info:
        alkstore.connect(url)
    assert info.value.url == url
    assert isinstance(info.value, ValueError)  # configuration mistakes are ValueErrors


def test_default_namespace_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALKSTORE_NAMESPACE", "from_env")
    with alkstore.connect("sqlite:///:memory:") as store:
        assert store.namespace == "from_env"
    monkeypatch.setenv("ALKSTORE_NAMESPACE", "Bad-Name")
    with pytest.raises(alkstore.InvalidName):
        alkstore.connect("sqlite:///:memory:")
    monkeypatch.delenv("ALKSTORE_NAMESPACE")
    with alkstore.connect("sqlite:///:memory:") as store:
        assert store.namespace == "alkstore"


def test_default_url_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALKSTORE_DB", "sqlite:///from-env.db")
    assert _config.parse_url(None).path == "from-env.db"
    monkeypatch.delenv("ALKSTORE_DB")
    assert _config.parse_url(None).url == "sqlite:///alkstore.db"


@pytest.mark.parametrize(
    "namespace",
    [
        "",
        "Upper",
        "1starts_with_digit",
        "has-dash",
        "semi;colon",
        "x; DROP TABLE orders; --",
        'quo"te',
        "a" * 41,
        "pg_catalog",
        "public",
        42,
    ],
)
def test_bad_namespaces_raise_before_touching_the_database(
    namespace: object, tmp_path: object
) -> None:
    with pytest.raises(alkstore.InvalidName) as info:
        alkstore.connect("sqlite:///:memory:", namespace=namespace)  # type: ignore[arg-type]
    assert info.value.kind == "namespace"
    # PostgreSQL too: the check runs before any connection attempt (this port is closed).
    with pytest.raises(alkstore.InvalidName):
        alkstore.connect("postgresql://127.0.0.1:1/none", namespace=namespace)  # type: ignore[arg-type]


def test_missing_sqlite_directory_is_invalid_url(tmp_path: object) -> None:
    with pytest.raises(alkstore.InvalidURL, match="no such directory"):
        alkstore.connect("sqlite:////nonexistent-dir/x/app.db")


def test_unreachable_postgres_is_a_storage_error() -> None:
    with pytest.raises(alkstore.StorageError, match="cannot connect to PostgreSQL"):
        alkstore.connect("postgresql://root@127.0.0.1:1/none")


def test_the_cli_help_names_connects_own_defaults() -> None:
    from relay.cli import _parser

    assert (_parser.DEFAULT_DB, _parser.DEFAULT_NAMESPACE) == (
        _config.DEFAULT_URL,
        _config.DEFAULT_NAMESPACE,
    )
