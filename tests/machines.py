"""The base of the hypothesis state machines that drive a store against a model
(tests/contract/test_*_model.py): one scratch namespace per run (`Backend.scratch`), a
store whose clock is the machine's own `now` (milliseconds), and a teardown that closes
it and removes the namespace whatever happened."""

from __future__ import annotations

from pathlib import Path

from hypothesis.stateful import RuleBasedStateMachine

import alkstore
from tests.conftest import Backend

START_MS = 1_700_000_000_000


class StoreMachine(RuleBasedStateMachine):
    """Subclasses set up what they need in `set_up` (queues, configuration) and close what
    they opened beside the store in `close`."""

    def __init__(self, backend: Backend, directory: Path, prefix: str) -> None:
        super().__init__()
        self.now = START_MS
        self.backend = backend.scratch(directory, prefix)
        self.store: alkstore.Store | None = None
        try:
            self.store = self.backend.connect(clock=self.clock)
            self.store.migrate()
            self.set_up(self.store)
        except BaseException:
            self.teardown()
            raise

    def set_up(self, store: alkstore.Store) -> None:
        """What the machine needs beside a migrated store."""

    def close(self) -> None:
        """Close what the machine opened beside the store (before the store closes)."""

    def clock(self) -> float:
        return self.now / 1000

    def teardown(self) -> None:
        try:
            self.close()
            if self.store is not None:
                self.store.close()
        finally:
            self.backend.remove()
