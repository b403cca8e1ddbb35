"""Operating queues (docs/adr/0017): every queue with its counts, jobs by state and by id,
cancel, retry, pause and resume, purge. Written once above the engines, as named queries
of each engine's `sql/operations.sql`; none of it is on a hot path.

Pause is the database's, not a process's: a paused queue's row in the queues table says
so, and every claim statement reads it (one primary-key probe, in the claim's first
look at the claim index), so claims of every process return nothing until `resume()`.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from alkstore import _backoff, _checks, _dead, _effects, _engine, _errors, _estimates, _jobs

JobState = Literal["ready", "scheduled", "running", "expired", "held", "parked"]
PurgeState = Literal["ready", "scheduled", "dead"]
_JOB_STATES: tuple[str, ...] = get_args(JobState)
_MAX_ID = 2**63 - 1
_LISTS = {  # listing.sql: the state's jobs found from an index (docs/adr/0023)
    "running": "jobs_list_running",
    "expired": "jobs_list_expired",
    "scheduled": "jobs_list_scheduled",
    "ready": "jobs_list_ready",
}
CHANGE_TRIES = 3  # cancel / retry: looks at a job whose state keeps changing under them


class QueueInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One queue as an operator sees it: `ready` (claimable now), `scheduled` (delayed, or
    waiting out a retry's backoff), `running` (leased), `dead` (dead letters), the age in
    seconds of the oldest ready job (None: none is ready) and whether it is paused.
    `estimated`: ready, scheduled and dead are the planner's estimates (`estimate=True` on
    a large PostgreSQL table; docs/adr/0023)."""

    name: str
    paused: bool
    ready: int
    scheduled: int
    running: int
    dead: int
    oldest_ready_age: float | None = None
    estimated: bool = False


def _info(name: str, row: tuple[Any, ...], estimated: bool = False) -> QueueInfo:
    paused, ready, scheduled, running, dead, oldest_ms = row
    return QueueInfo(
        name=name,
        paused=bool(paused),
        ready=ready,
        scheduled=scheduled,
        running=running,
        dead=dead,
        oldest_ready_age=None if oldest_ms is None else max(0.0, oldest_ms / 1000),
        estimated=estimated,
    )


def queues(engine: _engine.Engine, now: int | None) -> list[QueueInfo]:
    """Every queue of the namespace in name order: declared, subscribed, or reached only by
    jobs (`tx.enqueue`) or dead letters."""
    return [_info(row[0], row[1:]) for row in engine.run("queues_overview", {"now": now})]


def estimated_queues(engine: _engine.Engine, clock: _dead.Clock) -> list[QueueInfo]:
    """`queues`, estimated at scale (docs/adr/0023; exact below it and on SQLite)."""
    estimator = _estimates.Estimator(engine, clock)
    if not estimator.active:
        return queues(engine, clock.now_param())
    return [_info(n, estimator.counts(n, p), True) for n, p in estimator.names()]


def find(
    engine: _engine.Engine, now: int | None, job_id: int, queue: str | None = None
) -> _jobs.JobInfo | _jobs.DeadLetter | None:
    """A job by id, live or dead (None: neither; or not in `queue` when given)."""
    _checks.whole("id", job_id, 1, _MAX_ID)
    rows = engine.run("job_get", {"id": job_id, "queue": queue, "now": now})
    if not rows:
        return None
    return _jobs.dead_letter(rows[0]) if rows[0][2] == "dead" else _jobs.job_info(rows[0])


class Operations(_dead.DeadLetters):
    """The operator's half of `alkstore.Queue` (a mixin: Queue provides the attributes)."""

    def info(self, *, estimate: bool = False) -> QueueInfo:
        """This queue's counts and pause flag (zeros for a queue nothing has reached).
        `estimate=True`: estimated at scale, not counted (`estimated`; docs/adr/0023)."""
        if estimate:
            estimator = _estimates.Estimator(self._engine, self._rt)
            if estimator.active:
                return _info(self.name, estimator.counts(self.name), True)
        params = {"queue": self.name, "now": self._rt.now_param()}
        return _info(self.name, self._engine.run("queue_info", params)[0])

    def pause(self) -> None:
        """Stop handing out this queue's jobs, in every process: claims return nothing
        and an idle worker waits for nothing due; jobs are kept, enqueues go on, running
        jobs finish (ack, retry, fail) as usual. A queue with no declared row (reached
        only by `tx.enqueue`) gets one, with the default configuration."""
        params = {
            "queue": self.name,
            "backoff": _backoff.encode(_backoff.DEFAULT_BACKOFF),
            "visibility_ms": round(_checks.DEFAULT_VISIBILITY * 1000),
        }
        self._engine.run("queue_pause", params)

    def resume(self) -> None:
        """Hand out this queue's jobs again (and wake idle workers)."""
        if self._engine.run("queue_resume", {"queue": self.name}):
            self._engine.committed()

    def jobs(
        self, state: JobState | None = None, limit: int = 100, after: int = 0
    ) -> list[_jobs.JobInfo]:
        """Live jobs of this queue in id order, `limit` at a time after id `after`; only
        those in `state` ("ready", "scheduled", "running", "expired"; "held", "parked" in
        an ordered queue) when given. Dead letters are `dead_letters()`."""
        if state is not None and state not in _JOB_STATES:
            raise _errors.InvalidArgument(
                f"state must be one of {', '.join(_JOB_STATES)} (dead letters: "
                f"dead_letters()), got {state!r}"
            )
        params = {
            "queue": self.name,
            "state": state,
            "limit": _checks.whole("limit", limit, 1),
            "after": _checks.whole("after", after, 0, _MAX_ID),
            "now": self._rt.now_param(),
        }
        query = _LISTS.get(state, "jobs_list") if state is not None else "jobs_list"
        return [_jobs.job_info(row) for row in self._engine.run(query, params)]

    def get(self, job_id: int) -> _jobs.JobInfo | _jobs.DeadLetter | None:
        """This queue's job `job_id`: live (a JobInfo with its state, attempts and history),
        dead (a DeadLetter), or None."""
        return find(self._engine, self._rt.now_param(), job_id, self.name)

    def cancel(
        self, job_id: int | None = None, *, dedupe_key: str | None = None, force: bool = False
    ) -> None:
        """Delete a waiting job (ready, scheduled or expired): it never runs. Name it by
        id, or by the dedupe key it holds (`dedupe_key=`; docs/adr/0022).

        A running job raises JobRunning: its handler runs in a worker we cannot stop.
        `force=True` deletes it anyway: its holder's ack, retry, fail, snooze, heartbeat,
        `check()` and `transaction()` then raise LeaseLost and change nothing, and the
        worker's lease renewal marks it `lease_lost` and cancels an async handler (a
        long sync handler checks `job.lease_lost` or calls `job.check()` and stops).
        JobNotFound: no live job with that id or key in this queue (a dead letter:
        purge_dead)."""
        if (job_id is None) == (dedupe_key is None):
            raise _errors.InvalidArgument("cancel takes a job id or a dedupe_key (one of them)")
        if job_id is not None:
            self._change(job_id, "cancel", "job_cancel", force=bool(force))
            return
        _checks.dedupe_key(dedupe_key)
        assert dedupe_key is not None
        for _ in range(CHANGE_TRIES):
            found = _effects.job_by_key(self._engine, self.name, dedupe_key)
            if found is None:
                break
            try:
                self._change(found, "cancel", "job_cancel", force=bool(force))
                return
            except _errors.JobNotFound:
                continue  # it finished (or was replaced) meanwhile: look again
        raise _errors.JobNotFound(None, self.name, dedupe_key=dedupe_key)

    def retry(self, job_id: int) -> None:
        """Make a waiting job claimable now: a delayed one, or one waiting out a retry's
        backoff (its attempts are kept). An expired one gets its chance: its `expires`
        is lifted, and a job out of attempts gets one more. JobRunning for a running
        job, JobNotFound as `cancel` (a dead letter: requeue)."""
        self._change(job_id, "retry", "job_retry")
        self._engine.committed()

    def _change(self, job_id: int, operation: str, query: str, **more: object) -> None:
        _checks.whole("id", job_id, 1, _MAX_ID)
        params = {"id": job_id, "queue": self.name, **more}
        for _ in range(CHANGE_TRIES):
            if self._engine.run(query, {**params, "now": self._rt.now_param()}):
                return
            found = self.get(job_id)
            if found is None:
                raise _errors.JobNotFound(job_id, self.name)
            if isinstance(found, _jobs.DeadLetter):
                raise _errors.JobNotFound(job_id, self.name, dead=True)
            if found.state == "running":
                break
        raise _errors.JobRunning(job_id, operation)

    def purge(
        self,
        state: PurgeState | None = None,
        *,
        batch: int = _dead.BATCH,
        progress: _dead.Progress | None = None,
    ) -> int:
        """Delete this queue's waiting jobs: all of them (ready, scheduled and expired),
        or those in `state` ("ready", "scheduled"); "dead": its dead letters. Running
        jobs are never purged (cancel them one by one). In transactions of `batch` jobs,
        each a batch that stays done if the purge is interrupted; it takes the jobs
        enqueued before it started. Returns the count."""
        if state == "dead":
            return self.purge_dead("all", batch=batch, progress=progress)
        if state is not None and state not in ("ready", "scheduled"):
            raise _errors.InvalidArgument(
                f"state must be ready, scheduled or dead (running jobs: cancel), got {state!r}"
            )
        _checks.whole("batch", batch, 1, 100_000)
        last = self._engine.run("jobs_last_id", {})[0][0]
        params = {"queue": self.name, "state": state, "last": last, "batch": batch}
        done, after = 0, 0
        while True:
            params.update(after=after, now=self._rt.now_param())
            ids = [row[0] for row in self._engine.run("jobs_purge", params)]
            if ids:
                done += len(ids)
                after = max(ids)
                if progress is not None:
                    progress(done)
            if len(ids) < batch:
                return done
