"""The `alkstore` command line's settings, read from Django's (docs/adr/0024)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

# What Django hands psycopg besides libpq's own parameters: not part of a URL.
_NOT_LIBPQ = frozenset({"context", "cursor_factory", "prepare_threshold", "password"})


def database_url(alias: str, *, password: bool) -> str:
    """A postgresql:// URL for Django's database `alias`: libpq's parameters exactly as
    Django passes them to psycopg (NAME, USER, HOST, PORT and OPTIONS), so both reach
    the same database the same way; the password only if `password`."""
    if alias not in connections:
        raise CommandError(f"no database {alias!r} in settings.DATABASES")
    conn = connections[alias]
    if conn.vendor != "postgresql":
        raise CommandError(
            f"the database {alias!r} is {conn.vendor}: alkstore's Django integration runs "
            "on the postgresql backend (docs/adr/0024)"
        )
    params: dict[str, Any] = conn.get_connection_params()
    query = {
        key: str(value)
        for key, value in params.items()
        if key not in _NOT_LIBPQ and isinstance(value, str | int) and value != ""
    }
    if password and params.get("password"):
        query["password"] = str(params["password"])
    return "postgresql://?" + urlencode(query)


def namespace() -> str | None:
    """`settings.ALKSTORE_NAMESPACE`, when set."""
    value = getattr(settings, "ALKSTORE_NAMESPACE", None)
    return str(value) if value else None


def environment(alias: str) -> dict[str, str]:
    """$ALKSTORE_DB (and $PGPASSWORD, $ALKSTORE_NAMESPACE) for the command line on
    Django's database `alias`. The password goes in $PGPASSWORD, which libpq reads,
    not in the URL that messages may show."""
    env = {"ALKSTORE_DB": database_url(alias, password=False)}
    secret = connections[alias].get_connection_params().get("password")
    if secret:
        env["PGPASSWORD"] = str(secret)
    ns = namespace()
    if ns:
        env["ALKSTORE_NAMESPACE"] = ns
    return env
