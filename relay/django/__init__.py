"""Django integration (docs/adr/0024). Add "relay.django" to INSTALLED_APPS for
`manage.py alkstore ...`: the `alkstore` command line on the database Django is
configured with (relay, worker, status, migrate, ...).

Appending and enqueueing need no app: `alkstore.append(connection, ...)` and
`alkstore.enqueue(connection, ...)` inside `transaction.atomic()`.
`relay.django.connect()` opens a store on Django's database, for a worker module."""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

import alkstore
from relay.django import _settings


def connect(database: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> alkstore.Store:
    """`alkstore.connect()` on Django's database `database` (a settings.DATABASES alias),
    in `settings.ALKSTORE_NAMESPACE` unless `namespace=` is given."""
    namespace = kwargs.pop("namespace", None) or _settings.namespace()
    if namespace:
        kwargs["namespace"] = namespace
    return alkstore.connect(_settings.database_url(database, password=True), **kwargs)


__all__ = ["connect"]
