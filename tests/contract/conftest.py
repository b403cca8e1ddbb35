"""Fixtures the schedule suites share: a store on an injected clock that starts at
`tests.clock.MONDAY` (suites that need another clock define their own `clock`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import alkstore
from tests.clock import MONDAY, Clock
from tests.conftest import Backend


@pytest.fixture
def clock() -> Clock:
    return Clock(MONDAY.timestamp())


@pytest.fixture
def sstore(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    """A migrated store on `clock`."""
    with backend.migrated(clock=clock) as store:
        yield store
