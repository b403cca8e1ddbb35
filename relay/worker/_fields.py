"""The structured fields of every per-job log record (docs/adr/0019).

They ride on the record as one attribute, `record.alkstore` (a dict), so a JSON
formatter shows them as one object and no key can clash with a LogRecord attribute or
another library's `extra`: queue, job_id, attempt, max_attempts, event_type, position,
outcome and reason.
"""

from __future__ import annotations

from typing import Any

import alkstore


def fields(job: alkstore.Job[Any], outcome: str, reason: str = "") -> dict[str, Any]:
    """`extra=` for a log call about `job`."""
    return {
        "alkstore": {
            "queue": job.queue,
            "job_id": job.id,
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "event_type": job.type,
            "position": job.position,
            "outcome": outcome,
            "reason": reason,
        }
    }
