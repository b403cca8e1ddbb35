"""PostgreSQL errors as alkstore errors, by SQLSTATE: a missing table or schema is
NotMigrated, a missing privilege PermissionDenied, the other errors no retry fixes
PermanentError (the processes stop on them, docs/adr/0020), a lock or serialization
conflict DatabaseBusy, and the rest StorageError (transient)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import pq

from alkstore import _errors

_MISSING = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.InvalidSchemaName,
)
_MISSING_STATES = {"42P01", "42883", "42703", "3F000"}
_DENIED = "42501"  # insufficient_privilege
# SQLSTATE classes no retry fixes: syntax error or access rule violation (42: a missing
# privilege or object), invalid authorization (28), invalid schema name (3F)
_PERMANENT_CLASSES = ("42", "28", "3F")
# lock_not_available (lock_timeout, NOWAIT), serialization_failure, deadlock_detected
_BUSY = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
)
_BUSY_STATES = {"55P03", "40001", "40P01"}
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_PRIMARY = pq.DiagnosticField.MESSAGE_PRIMARY


def classified(
    state: str, message: str, role: str | None, operation: str | None
) -> _errors.AlkstoreError:
    """The alkstore error for a server error by its SQLSTATE: a permanent one (the
    processes stop on it, docs/adr/0020), a busy one, or a StorageError (transient)."""
    if state in _MISSING_STATES:
        return _errors.NotMigrated()
    if state == _DENIED:
        return _errors.PermissionDenied(message, role, operation)
    if state in _BUSY_STATES:
        return _errors.DatabaseBusy(f"{message} (SQLSTATE {state})")
    if state[:2] in _PERMANENT_CLASSES:
        return _errors.PermanentError(f"{message} (SQLSTATE {state})")
    return _errors.StorageError(f"{message} (SQLSTATE {state})")


def translated(
    exc: psycopg.Error, operation: str | None = None, role: str | None = None
) -> _errors.AlkstoreError:
    """`operation`: the named query that failed, `role`: the role we log in as, for the
    message of a denied privilege."""
    state = exc.sqlstate or ""
    if isinstance(exc, _MISSING):
        return _errors.NotMigrated()
    if isinstance(exc, _BUSY):
        return _errors.DatabaseBusy(f"{type(exc).__name__}: {exc}")
    if state == _DENIED or state[:2] in _PERMANENT_CLASSES:
        message = exc.diag.message_primary or str(exc)
        return classified(state, message, role, operation)
    return _errors.StorageError(f"{type(exc).__name__}: {exc}")


@contextmanager
def translate(operation: str | None = None, role: str | None = None) -> Iterator[None]:
    """Stop psycopg errors at the seam (`operation`: the named query that runs)."""
    try:
        yield
    except psycopg.Error as exc:
        raise translated(exc, operation, role) from exc


def result_error(result: pq.abc.PGresult, role: str | None = None) -> _errors.AlkstoreError:
    state = (result.error_field(_SQLSTATE) or b"").decode()
    if state == _DENIED:
        primary = (result.error_field(_PRIMARY) or b"").decode("utf-8", "replace")
        return classified(state, primary, role, None)
    message = result.error_message.decode("utf-8", "replace").strip()
    return classified(state, message, role, None)
