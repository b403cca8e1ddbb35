"""Transactional ack: a handler's writes and its job's ack in one transaction (ADR 0022).

`job.transaction()` opens a store transaction (`store.transaction()`: the same
`Transaction`, with `tx.connection`, `tx.append`, `tx.enqueue`) and, when the block ends
without an exception, deletes the job in it as its last statement, fenced by the
claim's lease token (`Engine.ack_in`: on PostgreSQL sent with COMMIT in one pipeline, a
statement that fails when it deletes nothing, so that COMMIT does not run). If the lease
was lost (the job was claimed again after its lease lapsed, cancelled, or finished some
other way), the delete finds no row:
the whole transaction rolls back and `LeaseLost` is raised. So the business writes and
the ack commit together or not at all, and a holder that lost its job commits nothing.

The delete comes last so that the job's row is locked (PostgreSQL) only between it and
COMMIT: the worker's lease renewal, which updates that row, never waits behind the
handler's work.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from alkstore import _engine, _errors

if TYPE_CHECKING:
    from alkstore._jobs import Job
    from alkstore._transaction import Transaction


class JobTransaction:
    """`with job.transaction() as tx:` (one use). See the module's docstring."""

    __slots__ = ("_inner", "_job", "_tx")

    def __init__(self, job: Job[Any], inner: AbstractContextManager[Transaction]) -> None:
        if job.acked:
            raise _errors.LeaseLost(job.id, "ack")
        self._job = job
        self._inner = inner

    def __enter__(self) -> Transaction:
        self._tx = self._inner.__enter__()
        return self._tx

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc_type is not None:  # the handler's error: roll back, the job stays held
            self._inner.__exit__(exc_type, exc, tb)
            return
        job = self._job
        tx = self._tx
        try:
            if tx._engine.ack_in(tx.connection, job.id, job.lease_token) is False:
                job.lease_lost = True
                raise _errors.LeaseLost(job.id, "ack")
        except BaseException as error:
            self._inner.__exit__(type(error), error, error.__traceback__)  # roll back
            raise
        try:
            self._inner.__exit__(None, None, None)  # COMMIT (raises if it fails: not acked)
        except _engine.AckRefused as refused:  # sent with COMMIT, found nothing: rolled back
            job.lease_lost = True
            raise _errors.LeaseLost(job.id, "ack") from refused
        job.acked = True
