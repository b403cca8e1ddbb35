"""The GRANTs of least privilege, per part alkstore plays (`alkstore sql --grants`).

Five parts, each a role the DBA names (docs/adr/0020, docs/guide/postgresql-platform.md):

- admin: owns the namespace's schema, so it runs `alkstore migrate` and every
  operator command (subscribe, replay, queues, dead letters, schedules);
- producer: the application servers: append events, enqueue jobs;
- worker: claims, acks, retries, dead-letters, renews leases, sweeps, registers itself;
- relay: sequences and relays the log, prunes it, fires schedules, sweeps (the
  standalone scheduler runs as this part too);
- reader: reads everything, for `alkstore status`, `events tail` and the other lists.

Reading the log numbers new events first (ADR 0004); the sequencer runs with its
owner's rights (migration 0007), so readers need EXECUTE on it, never UPDATE on the
log. LISTEN/NOTIFY and advisory locks need no privilege. A role that plays several
parts (a worker whose handlers enqueue) is granted several, or made a member of
the roles that are.

TABLES lists every table of the schema (a test compares it with the catalog): a
migration that adds one adds it here, with the parts that use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from alkstore import _errors

PARTS = ("admin", "producer", "worker", "relay", "reader")
TABLES = (
    "schema_migrations",
    "events",
    "log_head",
    "subscriptions",
    "locks",
    "queues",
    "jobs",
    "dead_letters",
    "schedules",
    "schedule_firings",
    "workers",
    "job_groups",  # written only by the ordering triggers, with their owner's rights
    "rate_windows",  # written only by claim_limited, with its owner's rights
    "key_rate_windows",  # the same
)
SEQUENCER = "sequence_events(integer)"

_SELECT = "SELECT"
_ALL = "SELECT, INSERT, UPDATE, DELETE"
PRIVILEGES: dict[str, dict[str, str]] = {
    "producer": {
        "schema_migrations": _SELECT,  # connect() checks the schema version
        "events": "INSERT",
        "queues": _SELECT,  # a queue's default max_attempts
        "jobs": "SELECT, INSERT",  # RETURNING id; a bulk enqueue reads its ids back
    },
    "worker": {
        "schema_migrations": _SELECT,
        "queues": _SELECT,
        "jobs": "SELECT, UPDATE, DELETE",
        "dead_letters": "SELECT, INSERT, DELETE",  # bury; the sweep's retention
        "workers": _ALL,  # the live-worker rows; the sweep forgets dead ones
        "locks": "SELECT, INSERT, UPDATE",  # the sweep records itself (sweep.last)
        "events": "SELECT, DELETE",  # the sweep's log retention
        "subscriptions": _SELECT,  # what every subscription has relayed (retention)
        "key_rate_windows": _ALL,  # a key-rate-limited claim counts its keys (ADR 0021)
    },
    "relay": {
        "schema_migrations": _SELECT,
        "events": "SELECT, INSERT, DELETE",  # relay; schedule firings; retention
        "log_head": _SELECT,
        "subscriptions": "SELECT, UPDATE",  # the batch locks and advances them
        "locks": "SELECT, INSERT, UPDATE",  # the relay and scheduler leases
        "queues": _SELECT,
        "jobs": _ALL,  # relayed jobs; the sweep
        "dead_letters": "SELECT, INSERT, DELETE",
        "schedules": "SELECT, UPDATE",
        "schedule_firings": "SELECT, INSERT, DELETE",
        "workers": "SELECT, DELETE",  # the sweep forgets workers not seen for an hour
    },
    "reader": dict.fromkeys(TABLES, _SELECT),
}
SEQUENCES: dict[str, dict[str, str]] = {
    "producer": {"jobs_id_seq": "USAGE"},  # a bulk enqueue (COPY) takes its ids in a range
}
SEQUENCING = ("relay", "reader")  # they read the log: EXECUTE on the sequencer

ABOUT = {
    "admin": "owns the namespace: runs `alkstore migrate` and every operator command",
    "producer": "appends events and enqueues jobs (the application servers)",
    "worker": "claims and finishes jobs, renews leases, sweeps (`alkstore worker`)",
    "relay": "relays and prunes the log, fires schedules, sweeps (`alkstore relay`, "
    "`alkstore scheduler`)",
    "reader": "reads everything (`alkstore status`, `events tail` and the other lists)",
}
_ROLE = re.compile(r"[a-z_][a-z0-9_$]{0,62}")


def check_role(part: str, role: object) -> str:
    if not isinstance(role, str) or not _ROLE.fullmatch(role):
        raise _errors.InvalidName(
            f"{part} role",
            role,
            "use a lowercase PostgreSQL identifier: letters, digits, _ and $, starting "
            "with a letter or _ (at most 63)",
        )
    return role


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def grants(namespace: str, dbname: str, roles: Mapping[str, str], version: int) -> str:
    """The SQL that gives each named role (part -> role) what its part needs."""
    unknown = sorted(set(roles) - set(PARTS))
    if unknown:
        raise _errors.InvalidArgument(f"unknown parts {unknown}: use {', '.join(PARTS)}")
    if not roles:
        raise _errors.InvalidArgument(
            "name at least one role: " + ", ".join(f"{part}=ROLE" for part in PARTS)
        )
    for part, role in roles.items():
        check_role(part, role)
    db, ns = _quoted(dbname), namespace
    lines = [
        f"-- GRANTs for alkstore namespace {ns} in database {dbname} (schema version "
        f"{version}), from `alkstore sql --grants`.",
        "-- Apply as a superuser or the schema's owner after `alkstore migrate`, and again",
        "-- after an upgrade that adds tables (every statement can run again). Parts and",
        "-- privileges: docs/guide/postgresql-platform.md.",
    ]
    for part in PARTS:
        if part not in roles:
            continue
        role = roles[part]
        lines += ["", f"-- {part} ({role}): {ABOUT[part]}"]
        lines.append(f"GRANT CONNECT ON DATABASE {db} TO {role};")
        if part == "admin":
            lines.append(
                "-- before its first `alkstore migrate` (a schema it owns is all it needs; creating"
            )
            lines.append("-- another namespace needs CREATE on the database):")
            lines.append(f"CREATE SCHEMA IF NOT EXISTS {ns} AUTHORIZATION {role};")
            lines.append(
                f"-- to see other roles' transactions in `alkstore status`: "
                f"GRANT pg_read_all_stats TO {role};"
            )
            continue
        lines.append(f"GRANT USAGE ON SCHEMA {ns} TO {role};")
        for table, privileges in PRIVILEGES[part].items():
            lines.append(f"GRANT {privileges} ON TABLE {ns}.{table} TO {role};")
        for sequence, privileges in SEQUENCES.get(part, {}).items():
            lines.append(f"GRANT {privileges} ON SEQUENCE {ns}.{sequence} TO {role};")
        if part in SEQUENCING:
            lines.append(f"GRANT EXECUTE ON FUNCTION {ns}.{SEQUENCER} TO {role};")
        if part == "reader":
            lines.append(
                f"-- to see other roles' transactions in `alkstore status`: "
                f"GRANT pg_read_all_stats TO {role};"
            )
    return "\n".join(lines) + "\n"
