"""The alkstore error tree: one root, data on the errors, docstrings as default messages."""

from __future__ import annotations


class AlkstoreError(Exception):
    """An alkstore operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())


class ConfigurationError(AlkstoreError, ValueError):
    """alkstore was configured with a value it cannot use."""


class InvalidURL(ConfigurationError):
    """The database URL is not one alkstore understands."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"invalid database URL {url!r}: {reason}")


class InvalidName(ConfigurationError):
    """A name (namespace, queue, ...) is not one alkstore accepts for its kind."""

    def __init__(self, kind: str, name: object, rule: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"invalid {kind} name {name!r}: {rule}")


class EventError(AlkstoreError):
    """An event could not be encoded or decoded."""


class UnknownEventType(EventError):
    """No Event class with this type tag is defined in this process."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"unknown event type {type_name!r}: define `class X(alkstore.Event, "
            f"tag={type_name!r})` and import it before decoding"
        )


class DuplicateEventType(EventError, ValueError):
    """Two Event classes claim the same type tag."""

    def __init__(self, type_name: str, first: type, second: type) -> None:
        self.type_name = type_name
        super().__init__(
            f"event type {type_name!r} is defined twice: "
            f"{first.__module__}.{first.__qualname__} and "
            f"{second.__module__}.{second.__qualname__}"
        )


class InvalidPayload(EventError):
    """A payload would not come back as it went in (docs/adr/0003): it does not match its
    event type, or holds what the stores cannot keep (NaN, NUL, a value JSON changes), or
    is over the size limit (PayloadTooLarge). `type_name` is None for a plain payload."""

    def __init__(self, type_name: str | None, detail: str) -> None:
        self.type_name = type_name
        self.detail = detail
        if type_name is None:
            super().__init__(f"invalid payload: {detail}")
        else:
            super().__init__(f"invalid payload for event type {type_name!r}: {detail}")


class InvalidHeaders(EventError):
    """Stored headers are not a JSON object of strings (written by hand?)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"headers are not a JSON object of strings: {detail}")


class NotInTransaction(AlkstoreError):
    """Appending needs an open transaction on the connection; alkstore never autocommits."""


class UnsupportedConnection(AlkstoreError, TypeError):
    """`alkstore.append` / `alkstore.enqueue` cannot write through this connection: it is
    not one whose transaction alkstore can join (docs/adr/0024). Nothing was written, and
    alkstore opened no connection of its own."""


class TransactionOpen(AlkstoreError):
    """A store transaction is open on this thread; inside it, use `tx` (docs/adr/0016)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "a store transaction is open on this thread: inside `with store.transaction() "
            "as tx:` use tx.append, tx.enqueue and tx.connection; other calls of the same "
            "store would run in a transaction of their own (docs/adr/0016)"
        )


class StorageError(AlkstoreError):
    """The database refused an operation."""


class DatabaseBusy(StorageError):
    """The database is busy: another transaction holds a lock this one needs (SQLite's
    "database is locked", PostgreSQL's lock timeout, serialization failure or deadlock).

    Transient, and nothing of the failed transaction is kept: roll it back and run it
    again. alkstore's own transactions wait and retry on their own; this reaches code
    that appends on a connection it owns (`alkstore.append`), whose busy timeout is its
    own."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"database busy ({detail}): roll the transaction back and run it again "
            "(a transient error; retry it)"
        )


class PermanentError(StorageError):
    """The database refused an operation for a reason retrying cannot fix (a missing
    privilege, table or schema). alkstore's processes stop on it with this one line
    instead of retrying: fix the cause, then start them again (docs/adr/0020)."""


class PermissionDenied(PermanentError):
    """The database role lacks a privilege the operation needs (SQLSTATE 42501)."""

    def __init__(self, detail: str, role: str | None = None, operation: str | None = None):
        self.detail = detail
        self.role = role
        self.operation = operation
        where = f", role {role!r}" if role else ""
        what = f", in alkstore's `{operation}`" if operation else ""
        super().__init__(
            f"{detail} (SQLSTATE 42501{where}{what}): the role lacks a privilege this "
            "needs; grant it what `alkstore sql --grants` generates for its part "
            "(docs/guide/postgresql-platform.md)"
        )


class NotMigrated(PermanentError):
    """alkstore's tables are missing or out of date: run `store.migrate()` or `alkstore migrate`."""


class SchemaTooNew(StorageError):
    """The database was migrated by a newer alkstore; this one does not know its schema."""

    def __init__(self, database_version: int, code_version: int) -> None:
        self.database_version = database_version
        self.code_version = code_version
        super().__init__(
            f"database schema {database_version} is newer than this alkstore "
            f"({code_version}); upgrade alkstore"
        )


class InvalidArgument(AlkstoreError, ValueError):
    """An argument is out of range or of the wrong kind."""


class QueueError(AlkstoreError):
    """A queue operation could not be done."""


class LeaseLost(QueueError):
    """This job's lease expired and the job was claimed again (or finished); nothing changed."""

    def __init__(self, job_id: int, operation: str) -> None:
        self.job_id = job_id
        self.operation = operation
        super().__init__(
            f"job {job_id}: cannot {operation}, the lease was lost (it expired and the job "
            "was claimed again, or the job already finished)"
        )


class DuplicateJob(QueueError):
    """A live job in this queue already has this dedupe key."""

    def __init__(self, queue: str, key: str) -> None:
        self.queue = queue
        self.key = key
        super().__init__(f"queue {queue!r} already has a live job with dedupe_key {key!r}")


class PayloadTooLarge(InvalidPayload, QueueError, ValueError):
    """The encoded payload is larger than the store's limit (events and jobs alike)."""

    def __init__(self, size: int, limit: int, type_name: str | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            type_name,
            f"{size} bytes encoded, over the limit of {limit} (raise it with "
            "max_payload_bytes=N on alkstore.connect, or on alkstore.append for your own "
            "connection; the same in every process)",
        )


class JobNotFound(QueueError):
    """No live job with this id in this queue (it finished, was cancelled, or is dead)."""

    def __init__(
        self,
        job_id: int | None,
        queue: str | None = None,
        *,
        dead: bool = False,
        dedupe_key: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.queue = queue
        self.dead = dead
        self.dedupe_key = dedupe_key
        where = "" if queue is None else f" in queue {queue!r}"
        if job_id is None:
            message = f"no live job with dedupe_key {dedupe_key!r}{where}"
        elif dead:
            message = f"job {job_id} is a dead letter{where}: requeue it first (dlq requeue)"
        else:
            message = f"no live job {job_id}{where}"
        super().__init__(message)


class JobRunning(QueueError):
    """The job is leased by a worker: an operator's change would race its handler."""

    def __init__(self, job_id: int, operation: str) -> None:
        self.job_id = job_id
        self.operation = operation
        if operation == "cancel":
            why = "its handler would go on (force=True or --force deletes it anyway)"
        else:
            why = "its handler's outcome decides what comes next"
        super().__init__(f"cannot {operation} job {job_id}: a worker is running it; {why}")
