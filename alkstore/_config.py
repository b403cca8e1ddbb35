"""Database URLs and names, checked before anything touches a database."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from alkstore import _errors

DEFAULT_URL = "sqlite:///alkstore.db"
DEFAULT_NAMESPACE = "alkstore"


def namespace_or_default(namespace: str | None) -> str:
    """The namespace given, else $ALKSTORE_NAMESPACE, else DEFAULT_NAMESPACE, checked."""
    if namespace is None:
        namespace = os.environ.get("ALKSTORE_NAMESPACE") or DEFAULT_NAMESPACE
    return check_name("namespace", namespace)


_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
NAME_RULE = "use 1-40 characters: lowercase letters, digits and _, starting with a letter"
# Queue names are values, never spliced into SQL, a channel or a file name (ADR 0006,
# addendum 2026-12-01): the separators users of other queues name them with.
_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}")
QUEUE_RULE = (
    "use 1-200 characters: ASCII letters, digits and _ . - / :, starting with a letter "
    "or digit (no spaces, commas or control characters)"
)
_RULES = {"queue": (_QUEUE, QUEUE_RULE)}


def check_name(kind: str, name: object) -> str:
    """Return `name` if it is a safe name of its kind, else raise InvalidName: a queue
    name by QUEUE_RULE, any other (namespace, lease, schedule) an identifier."""
    if isinstance(name, str) and (kind, name) in _checked:  # hot paths repeat names
        return name
    pattern, rule = _RULES.get(kind, (_NAME, NAME_RULE))
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise _errors.InvalidName(kind, name, rule)
    if kind == "namespace" and (name.startswith("pg_") or name == "public"):
        raise _errors.InvalidName(kind, name, "reserved by PostgreSQL")
    if len(_checked) < 10_000:
        _checked.add((kind, name))
    return name


_checked: set[tuple[str, object]] = set()


@dataclass(frozen=True)
class Target:
    """A parsed database URL."""

    engine: Literal["sqlite", "postgres"]
    url: str
    path: str = ""  # sqlite only: a file path or ":memory:"


def parse_url(url: str | None) -> Target:
    """Parse `sqlite:///path`, `sqlite:///:memory:` or `postgresql://...`.

    `None` means `$ALKSTORE_DB`, or the embedded default `sqlite:///alkstore.db`.
    """
    if url is None:
        url = os.environ.get("ALKSTORE_DB") or DEFAULT_URL
    if not isinstance(url, str) or not url:
        raise _errors.InvalidURL(str(url), "expected a non-empty string")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise _errors.InvalidURL(url, "expected scheme://..., e.g. sqlite:///app.db")
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest.startswith("/") or len(rest) < 2:
            raise _errors.InvalidURL(url, "expected sqlite:///relative.db or sqlite:////abs.db")
        path = rest[1:]
        if "?" in path or "#" in path:
            raise _errors.InvalidURL(url, "query strings are not supported for sqlite")
        return Target("sqlite", url, path)
    if scheme in ("postgresql", "postgres"):
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - validates the port
        except ValueError as exc:
            raise _errors.InvalidURL(url, str(exc)) from None
        return Target("postgres", url)
    raise _errors.InvalidURL(url, f"unknown scheme {scheme!r}: use sqlite or postgresql")
