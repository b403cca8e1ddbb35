"""Cron expressions: which ones a schedule takes, and croniter iterators over them.

Accepted: the classic five fields (minute hour day-of-month month day-of-week),
croniter's macros (`@hourly`, `@daily`, ...), and six fields with the seconds
first, marked as such: `@seconds-first S M H DoM Mon DoW`. Refused, with the
expression to write instead:

- a bare six-field expression: croniter reads its sixth field as seconds, honker,
  Quartz and Spring its first, so honker's `0 * * * * *` (once a minute) would
  fire 60 times in minute 0 of every hour;
- a range that wraps around (`30-10`, `fri-mon`): croniter reads `30-10` as
  every minute.

Expressions stored before these rules keep the meaning they had: a bare sixth
field is read as croniter reads it (seconds last). See docs/adr/0009-scheduler.md.
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import CroniterBadDateError, CroniterError, croniter

from alkstore import _errors

SECONDS_FIRST = "@seconds-first"
_Layout = tuple[tuple[str, int, int], ...]  # (field name, lowest, highest) per field
_SECOND = ("second", 0, 59)
_FIELDS: _Layout = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),  # 7 is Sunday too
)
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_DAYS = "sun mon tue wed thu fri sat".split()
_NAMES = {
    "month": {name: i + 1 for i, name in enumerate(_MONTHS)},
    "day-of-week": {name: i for i, name in enumerate(_DAYS)},
}


def croniter_form(cron: str) -> str:
    """The expression as croniter reads it: a seconds-first one with its seconds moved last."""
    fields = cron.split()
    if fields and fields[0] == SECONDS_FIRST:
        return " ".join([*fields[2:], fields[1]])
    return cron


def iterator(cron: str, start: datetime) -> croniter:
    return croniter(croniter_form(cron), start)


def check_cron(cron: str) -> str:
    """`cron` if a schedule may take it; InvalidArgument saying what to write instead."""
    if not isinstance(cron, str):
        raise _errors.InvalidArgument(f"invalid cron expression {cron!r}")
    fields = cron.split()
    layout: _Layout
    if fields and fields[0] == SECONDS_FIRST:
        if len(fields) != 7:
            raise _errors.InvalidArgument(
                f"invalid cron expression {cron!r}: {SECONDS_FIRST} takes six fields "
                "(second minute hour day month weekday)"
            )
        layout = (_SECOND, *_FIELDS)
        fields = fields[1:]
    elif len(fields) == 6:
        raise _errors.InvalidArgument(_six_fields(cron, fields))
    elif len(fields) == 5:
        layout = _FIELDS
    elif len(fields) == 1 and cron.strip().startswith("@"):
        layout, fields = (), []  # a macro: croniter decides
    else:
        raise _errors.InvalidArgument(
            f"invalid cron expression {cron!r}: write five fields (minute hour day month "
            f"weekday), or six as '{SECONDS_FIRST} second minute hour day month weekday'"
        )
    if not croniter.is_valid(croniter_form(cron)):
        raise _errors.InvalidArgument(f"invalid cron expression {cron!r}")
    _check_ranges(cron, fields, layout)
    try:  # croniter accepts "0 0 30 2 *"
        iterator(cron, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadDateError, CroniterError) as exc:
        raise _errors.InvalidArgument(f"cron expression {cron!r} never matches") from exc
    return cron


def _six_fields(cron: str, fields: list[str]) -> str:
    example = f", here {' '.join(fields[1:])!r} if the 0 is the second" if fields[0] == "0" else ""
    return (
        f"{cron!r} is a six-field cron expression: croniter reads its last field as seconds, "
        "honker, Quartz and Spring its first. Write five fields (minute hour day month "
        f"weekday){example}, or mark the seconds as first: '{SECONDS_FIRST} {cron}'"
    )


def _check_ranges(cron: str, fields: list[str], layout: _Layout) -> None:
    """Refuse a range whose start is after its end, giving the expression to write."""
    wrapped: list[str] = []
    fixed = list(fields)
    for i, (field, (name, low, high)) in enumerate(zip(fields, layout, strict=True)):
        parts = field.split(",")
        for j, part in enumerate(parts):
            span, slash, step = part.partition("/")
            first, dash, last = span.partition("-")
            start, end = _value(name, first), _value(name, last)
            if not dash or start is None or end is None or start <= end:
                continue
            wrapped.append(f"{part!r} ({name})")
            tail = f"{slash}{step}"
            if name == "day-of-week" and start == 7:  # 7 is Sunday: 0
                parts[j] = f"{low}-{end}{tail}"
            elif step:
                parts[j] = f"{start}-{high}{tail},{low}-{end}{tail}"
            else:
                before = f"{start}" if start == high else f"{start}-{high}"
                after = f"{low}" if end == low else f"{low}-{end}"
                parts[j] = f"{before},{after}"
        fixed[i] = ",".join(parts)
    if wrapped:
        prefix = [SECONDS_FIRST] if len(layout) == 6 else []
        instead = " ".join([*prefix, *fixed])
        raise _errors.InvalidArgument(
            f"cron expression {cron!r}: the range {', '.join(wrapped)} wraps around; "
            f"write {instead!r}"
        )


def _value(field: str, text: str) -> int | None:
    """A field's number or name as an int; None for anything else (L, W, #, ...)."""
    if text.isdigit():
        return int(text)
    return _NAMES.get(field, {}).get(text.lower())
