"""Settings of the example: PostgreSQL from $DATABASE_URL (psycopg 3 backend), and the
app that carries `manage.py alkstore` ("relay.django")."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlsplit

_url = urlsplit(os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:5432/orders"))

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(_url.path.lstrip("/")),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "OPTIONS": dict(parse_qsl(_url.query)),  # e.g. ?options=-csearch_path%3Dapp
    }
}
INSTALLED_APPS = ["relay.django", "examples.django_orders.orders"]
ALKSTORE_NAMESPACE = os.environ.get("ALKSTORE_NAMESPACE", "alkstore")
SECRET_KEY = "example-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
