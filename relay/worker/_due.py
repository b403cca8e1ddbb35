"""How long an idle claim loop sleeps: until its queue's next due time, `poll` at most.

Nothing commits when a delayed job's time comes, a retry's backoff ends or a dead
holder's lease runs out, so no wake announces them: the loop's own timer must (ADR
0008 addendum 2026-12-01). `Queue.next_due()` measures the time left on the database's
clock, in the statement that reads it; it is turned into a deadline on this process's
monotonic clock once, from the moment the question was sent, so neither the round trip
nor a difference between the two clocks makes the wake late (at worst a round trip
early: the claim then finds nothing and the loop asks again).
"""

from __future__ import annotations

import logging
import time

import alkstore

log = logging.getLogger("alkstore.worker")

FIRST_RETRY = 0.001  # seconds: the second look at a job due now that the claim missed
ON_ERROR = 1.0  # seconds: the most an idle loop sleeps when the due time is unknown


class DueTimer:
    """One claim loop's timer; call `timeout()` right after a claim found nothing."""

    def __init__(self, queue: alkstore.Queue) -> None:
        self._queue = queue
        self._missed = 0.0  # the next sleep when a job due now was missed again

    def timeout(self, poll: float) -> float:
        """Seconds to sleep on the listener: until the next due time, at most `poll`."""
        asked = time.monotonic()
        try:
            due = self._queue.next_due()
        except alkstore.StorageError as exc:
            log.warning("next due time on %s unknown (%s)", self._queue.name, exc)
            return min(poll, ON_ERROR)
        if due is None or due > 0:
            self._missed = 0.0
            if due is None:
                return poll
            return max(0.0, min(poll, asked + due - time.monotonic()))
        # Due now, yet the claim found nothing: it fell due just after the claim (look
        # again at once), or another claim holds its row and is about to lease it.
        # Look again soon, later each time, so a row that stays like that costs little.
        sleep = self._missed
        self._missed = min(poll, max(FIRST_RETRY, 2 * self._missed))
        return min(poll, sleep)
