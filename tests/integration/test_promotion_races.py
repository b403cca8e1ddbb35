"""The promotion of an ordered key's next job meets a writer that does not take the key's
row (docs/adr/0021, addendum 2026-12-01c). Cancelling a held job, or an operator's
retry of one, deletes or changes it without the key's lock; when that writer has the
job's row while an ack promotes it, the promotion's update waits for it, then finds
the row gone or moved. The key is tried again with a fresh snapshot: the next job, or
the changed one, is promoted. (Before, the key's remaining jobs stayed held for good.)
PostgreSQL: SQLite has one writer at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg

from tests.conftest import Backend


def waits_for_a_lock(url: str, query_part: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s",
            (f"%{query_part}%",),
        ).fetchone()
    return bool(row and row[0])


def ack_while_held(
    pg_backend: Backend, change: Callable[[psycopg.Connection, str, int], None]
) -> list[str]:
    """Three jobs of one key; the head claimed; `change` run on the next one in a
    transaction held open until the head's ack waits for it; then what is claimable."""
    with pg_backend.migrated() as store:
        q = store.queue("ordered")
        q.configure(ordered=True)
        _, second, _ = q.enqueue_many(["head", "next", "last"], group="k")
        [head] = q.claim_many(10)
        errors: list[BaseException] = []

        def ack() -> None:
            try:
                head.ack()
            except BaseException as exc:  # reported below
                errors.append(exc)

        with psycopg.connect(pg_backend.url) as conn:
            assert second is not None
            change(conn, pg_backend.namespace, second)
            acker = threading.Thread(target=ack)
            acker.start()
            deadline = time.monotonic() + 10
            while not waits_for_a_lock(pg_backend.url, f"{pg_backend.namespace}.jobs"):
                assert time.monotonic() < deadline, "the ack never waited for the held job"
                assert acker.is_alive(), errors
                time.sleep(0.02)
            conn.commit()
        acker.join(10)
        assert not acker.is_alive() and errors == []
        return [str(job.raw_payload) for job in q.claim_many(10)]


def test_a_held_job_cancelled_during_the_promotion_passes_the_turn_on(
    pg_backend: Backend,
) -> None:
    def cancel(conn: psycopg.Connection, ns: str, job_id: int) -> None:
        conn.execute(f"DELETE FROM {ns}.jobs WHERE id = %s", (job_id,))

    assert ack_while_held(pg_backend, cancel) == ["last"]


def test_a_held_job_changed_during_the_promotion_is_promoted(pg_backend: Backend) -> None:
    def retry(conn: psycopg.Connection, ns: str, job_id: int) -> None:  # as job_retry does
        conn.execute(f"UPDATE {ns}.jobs SET attempts = 0 WHERE id = %s", (job_id,))

    assert ack_while_held(pg_backend, retry) == ["next"]


def test_the_queue_api_sees_the_same(pg_backend: Backend) -> None:
    """A cancel through the API of a held job, beside the head's ack: nothing waits."""
    with pg_backend.migrated() as store:
        q = store.queue("ordered")
        q.configure(ordered=True)
        _, second, _ = q.enqueue_many(["head", "next", "last"], group="k")
        assert second is not None
        [head] = q.claim_many(10)
        q.cancel(second)
        head.ack()
        assert [job.raw_payload for job in q.claim_many(10)] == ["last"]
