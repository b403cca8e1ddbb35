"""The SQLite engine (apsw): single writer, WAL, a data_version watcher for wakes."""

from alkstore.sqlite._engine import SqliteEngine
from alkstore.sqlite._owned import append_on, enqueue_on

__all__ = ["SqliteEngine", "append_on", "enqueue_on"]
