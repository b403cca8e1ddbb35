"""alkstore: the transactional outbox as an event log, on SQLite or PostgreSQL."""

from alkstore._append import append, append_many
from alkstore._engine import Engine, LogEntry
from alkstore._errors import (
    AlkstoreError,
    ConfigurationError,
    DuplicateEventType,
    EventError,
    InvalidName,
    InvalidPayload,
    InvalidURL,
    NotInTransaction,
    NotMigrated,
    StorageError,
    UnknownEventType,
)
from alkstore._events import Event
from alkstore._store import Log, Store, Transaction, connect
from alkstore._wake import Listener

__all__ = [
    "AlkstoreError",
    "ConfigurationError",
    "DuplicateEventType",
    "Engine",
    "Event",
    "EventError",
    "InvalidName",
    "InvalidPayload",
    "InvalidURL",
    "Listener",
    "Log",
    "LogEntry",
    "NotInTransaction",
    "NotMigrated",
    "StorageError",
    "Store",
    "Transaction",
    "UnknownEventType",
    "append",
    "append_many",
    "connect",
]
__version__ = "0.1.0"
