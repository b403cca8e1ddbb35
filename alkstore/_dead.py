"""Dead letters as an operator handles them (docs/adr/0006, 0017): listed and counted by
when they died and by their error, requeued and purged in batched transactions.

A bulk operation (`requeue` or `purge_dead` of a selection) reads the selection a page at
a time (ids and reasons: the error pattern is a Python regular expression) and writes it
`batch` dead letters per transaction. The write moves or deletes only what is still dead
in this queue, so an interrupted operation leaves every dead letter either done or still
dead, never both and never lost, and running it again does the rest. It takes what had
died when it started: a job that dies again meanwhile stays dead (the run never loops).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from alkstore import _checks, _engine, _errors, _jobs

BATCH = 500  # dead letters (or jobs) per transaction of a bulk operation
FAR = 2**62  # epoch ms past any time a row holds
_MAX_ID = 2**63 - 1
_encode = msgspec.json.Encoder().encode

Progress = Callable[[int], None]
"""Called after each batch's transaction with the count done so far."""


class Clock(Protocol):
    """What the operations need of the store's runtime (`_queue.Runtime`)."""

    def now_param(self) -> int | None: ...

    def now_ms(self) -> int: ...


def pattern(error: object) -> re.Pattern[str] | None:
    """An error filter: a regular expression searched in the dead letter's reason."""
    if error is None:
        return None
    if not isinstance(error, str):
        raise _errors.InvalidArgument(f"error must be a str (a regular expression), got {error!r}")
    try:
        return re.compile(error)
    except re.error as exc:
        raise _errors.InvalidArgument(
            f"error must be a regular expression, got {error!r}: {exc}"
        ) from None


def check_ids(ids: Iterable[int]) -> list[int]:
    values = list(ids)
    for value in values:
        _checks.whole("id", value, 1, _MAX_ID)
    return values


def chunks(values: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class DeadLetters:
    """The dead-letter half of `alkstore.Queue` (a mixin: Queue provides the attributes)."""

    name: str
    _rt: Clock
    _engine: _engine.Engine

    def dead_letters(
        self,
        limit: int = 100,
        after: int = 0,
        *,
        since: datetime | float | None = None,
        error: str | None = None,
    ) -> list[_jobs.DeadLetter]:
        """Dead letters of this queue in id order, `limit` at a time after id `after`;
        only those that died at or after `since` (an aware datetime or epoch seconds)
        and whose reason matches the regular expression `error` (`re.search`)."""
        _checks.whole("limit", limit, 1)
        _checks.whole("after", after, 0, _MAX_ID)
        if since is None and error is None:
            params = {"queue": self.name, "after": after, "limit": limit}
            return [_jobs.DeadLetter(row) for row in self._engine.run("dead_letters", params)]
        match = pattern(error)
        page = limit if match is None else max(limit, 100)
        params = {"queue": self.name, "since": self._since(since), "until": FAR, "limit": page}
        found: list[_jobs.DeadLetter] = []
        while len(found) < limit:
            rows = self._engine.run("dead_page", {**params, "after": after})
            found += [
                _jobs.DeadLetter(row) for row in rows if match is None or match.search(row[12])
            ]
            if len(rows) < page:
                break
            after = rows[-1][0]
        return found[:limit]

    def count_dead(self, *, since: datetime | float | None = None, error: str | None = None) -> int:
        """How many dead letters `dead_letters(since=..., error=...)` would list in all."""
        match = pattern(error)
        since_ms = self._since(since)
        if match is None:
            params = {"queue": self.name, "since": since_ms, "until": FAR}
            return int(self._engine.run("dead_count", params)[0][0])
        return sum(map(len, self._select(since_ms, FAR, match, BATCH)))

    def requeue(
        self,
        ids: Iterable[int] | None = None,
        *,
        reset_attempts: bool = True,
        since: datetime | float | None = None,
        error: str | None = None,
        batch: int = BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Move dead letters back into the queue, visible now: the given ids, or (ids
        None) every one that died at or after `since` and whose reason matches `error`.
        Returns the count that came back.

        `batch` dead letters per transaction (see the module's docstring: interrupted, it
        loses nothing; again, it does the rest). A dead letter whose dedupe key a live job
        holds stays dead; of dead letters sharing a key, the oldest comes back."""
        _checks.whole("batch", batch, 1, 100_000)
        params = {"queue": self.name, "reset": bool(reset_attempts), "all": False}
        done = 0
        for group in self._groups(ids, since, error, None, batch):
            params.update(ids=_encode(group).decode(), now=self._rt.now_param())
            count = len(self._engine.run("requeue", params))
            if count:
                self._engine.committed()
            done += count
            if progress is not None:
                progress(done)
        return done

    def purge_dead(
        self,
        ids: Iterable[int] | Literal["all"] | None = None,
        *,
        older_than: float | None = None,
        since: datetime | float | None = None,
        error: str | None = None,
        batch: int = BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete dead letters: the given ids, or "all" of them, or those older than
        `older_than` seconds, that died at or after `since`, whose reason matches `error`
        (the filters combine). In transactions of `batch`, as `requeue`."""
        if ids is None and older_than is None and since is None and error is None:
            raise _errors.InvalidArgument(
                'purge_dead needs ids (or "all"), older_than, since or error'
            )
        _checks.whole("batch", batch, 1, 100_000)
        older_ms = None
        if older_than is not None:
            older_ms = int(_checks.seconds("older_than", older_than) * 1000)
        until = None
        if older_ms is not None and (ids is None or ids == "all"):
            until = self._rt.now_ms() - older_ms
        chosen = None if ids is None or ids == "all" else ids
        params = {"queue": self.name, "all": False, "older_ms": None}
        if chosen is not None:
            params["older_ms"] = older_ms
        done = 0
        for group in self._groups(chosen, since, error, until, batch):
            params.update(ids=_encode(group).decode(), now=self._rt.now_param())
            done += len(self._engine.run("purge_dead", params))
            if progress is not None:
                progress(done)
        return done

    def _groups(
        self,
        ids: Iterable[int] | str | None,
        since: datetime | float | None,
        error: str | None,
        until: int | None,
        batch: int,
    ) -> Iterator[list[int]]:
        """The ids a bulk operation writes, `batch` at a time."""
        if isinstance(ids, str):
            raise _errors.InvalidArgument(f'ids must be ids or "all", got {ids!r}')
        if ids is not None:
            if since is not None or error is not None:
                raise _errors.InvalidArgument("pass ids, or since / error to select, not both")
            return chunks(check_ids(ids), batch)
        match = pattern(error)
        since_ms = self._since(since)
        now = self._rt.now_ms()  # what had died by now, and no later death
        return self._select(since_ms, now if until is None else min(until, now), match, batch)

    def _select(
        self, since_ms: int, until_ms: int, match: re.Pattern[str] | None, batch: int
    ) -> Iterator[list[int]]:
        """The matching dead letters' ids in id order, `batch` at a time, read a page at a
        time as the caller goes (nothing read ahead of the writes but one page)."""
        params: dict[str, Any] = {
            "queue": self.name,
            "since": since_ms,
            "until": until_ms,
            "limit": batch,
            "after": 0,
        }
        pending: list[int] = []
        while True:
            rows = self._engine.run("dead_reasons", params)
            pending += [i for i, reason in rows if match is None or match.search(reason)]
            while len(pending) >= batch:
                yield pending[:batch]
                pending = pending[batch:]
            if len(rows) < batch:
                break
            params["after"] = rows[-1][0]
        if pending:
            yield pending

    @staticmethod
    def _since(since: datetime | float | None) -> int:
        return -FAR if since is None else _checks.instant_ms("since", since)
