"""The integrations are optional: `import alkstore` loads neither SQLAlchemy nor Django
(nor the standard library's sqlite3, which alkstore refuses), and `alkstore.append` /
`alkstore.enqueue` tell the object they cannot use by its type (docs/adr/0024)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import alkstore
from tests.events import OrderPlaced


def test_importing_alkstore_loads_no_orm() -> None:
    probe = (
        "import sys, alkstore; "
        "print(sorted(m for m in ('sqlalchemy', 'django', 'sqlite3') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


class Lookalike:
    """Not a connection, whatever it is called."""

    in_atomic_block = False  # half of Django's shape is not enough


@pytest.mark.parametrize("conn", [object(), "postgresql://x", Lookalike()])
def test_an_object_that_is_no_connection_is_named_in_the_error(conn: object) -> None:
    name = type(conn).__qualname__
    with pytest.raises(alkstore.UnsupportedConnection, match=name) as info:
        alkstore.enqueue(conn, "q", 1)  # type: ignore[call-overload]
    assert isinstance(info.value, TypeError)
    with pytest.raises(alkstore.UnsupportedConnection, match=name):
        alkstore.append(conn, OrderPlaced(order_id=1))  # type: ignore[call-overload]
