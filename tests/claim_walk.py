"""The claim as it was before issue 13: one walk of the claim index, `visible_at <= now`
a filter. The reference the per-level claim is held to (tests/contract/test_claim_order.py):
what it takes, in which order, and what it writes, on the same rows at the same time.

Run on a connection of the test's own and rolled back: it changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import Backend

SQLITE_NOW = "(SELECT coalesce(:now, CAST(unixepoch('subsec') * 1000 AS INTEGER)))"
SQLITE = """
UPDATE {ns}__jobs SET
    attempts = attempts + :go,
    started = :go,
    claimed_for = visible_at,
    visible_at = {now} + :lease_ms,
    lease_ms = :lease_ms,
    lease_token = (abs(random()) % 9007199254740991) + 1,
    history = CASE WHEN lease_token IS NULL OR NOT started THEN history
              ELSE json_insert(history, '$[#]', json_object(
                  'attempt', attempts, 'error', 'lease expired', 'at', visible_at))
              END
WHERE id IN (
    SELECT id FROM {ns}__jobs
    WHERE queue = :queue
      AND +visible_at <= {now}
      AND attempts < max_attempts
      AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now})
    ORDER BY priority DESC, visible_at, id
    LIMIT :n
)
RETURNING id
"""

PG_NOW = "coalesce(%(now)s::bigint, (extract(epoch FROM statement_timestamp()) * 1000)::bigint)"
PG_UP_FOR_LEASE = """(%(now)s::bigint IS NOT NULL
 OR {now} - (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint >= lease_ms)"""
POSTGRES = """
WITH next AS (
    SELECT id FROM {ns}.jobs
    WHERE queue = %(queue)s
      AND visible_at <= {now}
      AND attempts < max_attempts
      AND (expires_at IS NULL OR attempts > 0 OR expires_at > {now})
      AND (lease_token IS NULL OR {up_for_lease})
    ORDER BY priority DESC, visible_at, id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {ns}.jobs AS j SET
    attempts = j.attempts + %(go)s::int,
    started = %(go)s::int::boolean,
    claimed_for = j.visible_at,
    visible_at = {now} + %(lease_ms)s,
    lease_ms = %(lease_ms)s,
    lease_token = floor(random() * 9007199254740991)::bigint + 1,
    history = CASE WHEN j.lease_token IS NULL OR NOT j.started THEN j.history
              ELSE j.history || jsonb_build_array(jsonb_build_object(
                  'attempt', j.attempts, 'error', 'lease expired', 'at', j.visible_at))
              END
FROM next WHERE j.id = next.id
RETURNING j.id
"""

# What a claim writes, read back per claimed job (the lease token is random).
COLUMNS = "id, priority, attempts, started, claimed_for, visible_at, lease_ms, history"


def _sql(backend: Backend) -> str:
    if backend.name == "sqlite":
        return SQLITE.replace("{now}", SQLITE_NOW).replace("{ns}", backend.namespace)
    up_for_lease = PG_UP_FOR_LEASE.replace("{now}", PG_NOW)
    text = POSTGRES.replace("{up_for_lease}", up_for_lease).replace("{now}", PG_NOW)
    return text.replace("{ns}", backend.namespace)


def claimed_rows(backend: Backend, conn: Any, ids: list[int]) -> list[tuple[Any, ...]]:
    """COLUMNS of the given jobs, by id, on `conn` (history as text, started as 0/1)."""
    if not ids:
        return []
    if backend.name == "sqlite":
        marks = ", ".join("?" * len(ids))
        sql = f"SELECT {COLUMNS} FROM {backend.namespace}__jobs WHERE id IN ({marks}) ORDER BY id"
        rows = [tuple(row) for row in conn.execute(sql, ids)]
    else:
        sql = f"SELECT {COLUMNS} FROM {backend.namespace}.jobs WHERE id = ANY(%s) ORDER BY id"
        rows = [tuple(row) for row in conn.execute(sql, (ids,))]
    return [(*row[:3], int(row[3]), *row[4:7], _history(row[7])) for row in rows]


def _history(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def walk(
    backend: Backend, queue: str, n: int, start: int, lease_ms: int, now: int | None
) -> list[tuple[Any, ...]]:
    """What `Queue.claim_many(n, start=start)` took and wrote by the old walk: COLUMNS of
    each claimed job, by id; rolled back."""
    sql = _sql(backend)
    params: dict[str, Any] = {"queue": queue, "now": now, "lease_ms": lease_ms}
    conn = backend.raw_connection()
    try:
        if backend.name == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
        ids = _two_claims(conn, sql, params, n, start)
        return claimed_rows(backend, conn, ids)
    finally:
        if backend.name == "sqlite":
            conn.execute("ROLLBACK")
        else:
            conn.rollback()
        conn.close()


def _two_claims(conn: Any, sql: str, params: dict[str, Any], n: int, start: int) -> list[int]:
    """claim_many's split: `start` jobs started, then the rest prefetched if all came."""
    ids = [row[0] for row in conn.execute(sql, {**params, "n": start or n, "go": int(start > 0)})]
    if 0 < start < n and len(ids) == start:
        ids += [row[0] for row in conn.execute(sql, {**params, "n": n - start, "go": 0})]
    return ids
