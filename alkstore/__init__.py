"""alkstore: the transactional outbox as an event log, on SQLite or PostgreSQL."""

from alkstore._append import append, append_many, enqueue
from alkstore._astore import AsyncJob, AsyncQueue, AsyncStore, open_async
from alkstore._atx import AsyncTransaction
from alkstore._backoff import Backoff, Exponential, Fixed, Linear
from alkstore._bulk import JobSpec
from alkstore._engine import Engine, LogEntry
from alkstore._errors import (
    AlkstoreError,
    ConfigurationError,
    DatabaseBusy,
    DuplicateEventType,
    DuplicateJob,
    EventError,
    InvalidArgument,
    InvalidName,
    InvalidPayload,
    InvalidURL,
    JobNotFound,
    JobRunning,
    LeaseLost,
    NotInTransaction,
    NotMigrated,
    PayloadTooLarge,
    PermanentError,
    PermissionDenied,
    QueueError,
    SchemaTooNew,
    StorageError,
    TransactionOpen,
    UnknownEventType,
    UnsupportedConnection,
)
from alkstore._events import Event
from alkstore._jobs import Attempt, DeadLetter, Job, JobInfo, QueueStats, SweepResult
from alkstore._leases import Renewal
from alkstore._maintenance import Retention
from alkstore._ops import QueueInfo
from alkstore._queue import Queue
from alkstore._queue_config import QueueConfig
from alkstore._routing import Lease, NotLeader, Replay, Subscription
from alkstore._schedules import Schedule, Schedules
from alkstore._sinks import SinkBatch, SinkEvent, SinkSubscription
from alkstore._status import Holdup, Lag, Status
from alkstore._store import Log, Store, connect
from alkstore._transaction import Transaction
from alkstore._wake import Listener
from alkstore._workers import Presence, WorkerInfo

__all__ = [
    "AlkstoreError",
    "AsyncJob",
    "AsyncQueue",
    "AsyncStore",
    "AsyncTransaction",
    "Attempt",
    "Backoff",
    "ConfigurationError",
    "DatabaseBusy",
    "DeadLetter",
    "DuplicateEventType",
    "DuplicateJob",
    "Engine",
    "Event",
    "EventError",
    "Exponential",
    "Fixed",
    "Holdup",
    "InvalidArgument",
    "InvalidName",
    "InvalidPayload",
    "InvalidURL",
    "Job",
    "JobInfo",
    "JobNotFound",
    "JobRunning",
    "JobSpec",
    "Lag",
    "Lease",
    "LeaseLost",
    "Linear",
    "Listener",
    "Log",
    "LogEntry",
    "NotInTransaction",
    "NotLeader",
    "NotMigrated",
    "PayloadTooLarge",
    "PermanentError",
    "PermissionDenied",
    "Presence",
    "Queue",
    "QueueConfig",
    "QueueError",
    "QueueInfo",
    "QueueStats",
    "Renewal",
    "Replay",
    "Retention",
    "Schedule",
    "Schedules",
    "SchemaTooNew",
    "SinkBatch",
    "SinkEvent",
    "SinkSubscription",
    "Status",
    "StorageError",
    "Store",
    "Subscription",
    "SweepResult",
    "Transaction",
    "TransactionOpen",
    "UnknownEventType",
    "UnsupportedConnection",
    "WorkerInfo",
    "append",
    "append_many",
    "connect",
    "enqueue",
    "open_async",
]
__version__ = "0.1.0"
