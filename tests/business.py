"""A business table beside alkstore's, for the transactional-ack tests (ADR 0022): one row
per handled job, written through `tx.connection` as an application would."""

from __future__ import annotations

from typing import Any

import alkstore


class Business:
    """`orders_<namespace>` (SQLite) or `<namespace>.orders` (PostgreSQL; dropped with the
    namespace's schema): (job INTEGER PRIMARY KEY, note TEXT)."""

    def __init__(self, store: alkstore.Store) -> None:
        self.sqlite = store.engine.name == "sqlite"
        ns = store.namespace
        self.table = f"orders_{ns}" if self.sqlite else f"{ns}.orders"
        with store.transaction() as tx:
            tx.connection.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (job BIGINT PRIMARY KEY, note TEXT)"
            )
        self._store = store

    def write(self, tx: alkstore.Transaction, job_id: int, note: str = "done") -> None:
        mark = "?" if self.sqlite else "%s"
        sql = f"INSERT INTO {self.table} (job, note) VALUES ({mark}, {mark})"
        tx.connection.execute(sql, (job_id, note))

    def rows(self) -> dict[int, str]:
        with self._store.transaction() as tx:
            cursor: Any = tx.connection.execute(f"SELECT job, note FROM {self.table}")
            return {int(job): str(note) for job, note in cursor.fetchall()}
