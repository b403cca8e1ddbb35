"""The payload check's two halves: cheap proofs that an event comes back as it went in,
and the words of an InvalidPayload when a payload would not.

The codec (alkstore/_events.py) accepts a payload when decoding its JSON gives back a
value equal to it: an event decoded with its own Struct type, a plain payload decoded
as JSON. That comparison refuses event fields that do not match their type, NaN and
infinity (JSON has neither: msgspec writes null), and values JSON gives back changed (a
datetime or Decimal as str, a set or tuple as list); a string holding NUL is refused
because PostgreSQL's jsonb cannot store it (docs/adr/0003, addendum 2026-12-01).

Decoding an event costs more than encoding it, so the common events skip it:
`event_check(cls)` proves in a few type tests that an event whose fields are ints,
strings without NUL, finite floats, bools or None comes back equal. Other events, and
plain payloads (for which a walk in Python costs more than msgspec's decode), are
decoded and compared; only a refused payload is walked by `explain`, to name the value
and where it is.
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Callable
from typing import Any

import msgspec

NUL_ESCAPE = b"\\u0000"
"""How msgspec writes NUL in JSON. Its absence from the encoded bytes proves there is no
NUL; its presence may also be an escaped backslash before `u0000` (then `explain` finds
nothing)."""

PLAIN = (
    "a plain payload is JSON: dict with str keys, list, str, int, float, bool, None; "
    "for other types use an alkstore.Event with typed fields"
)

_MISSING: Any = object()


_TESTS: dict[type, str] = {  # msgspec.inspect types -> a test proving `{v}` comes back
    msgspec.inspect.IntType: "type({v}) is int",
    msgspec.inspect.StrType: '(type({v}) is str and "\\x00" not in {v})',
    msgspec.inspect.FloatType: "(type({v}) is float and {v} - {v} == 0.0)",
    msgspec.inspect.BoolType: "type({v}) is bool",
    msgspec.inspect.NoneType: "{v} is None",
}


def _test(info: msgspec.inspect.Type) -> str | None:
    """A test proving `{v}` decodes back equal as type `info`, or None (no cheap proof)."""
    if isinstance(info, msgspec.inspect.UnionType):
        tests = [_test(member) for member in info.types]
        if any(test is None for test in tests):
            return None
        return "(" + " or ".join(tests) + ")"  # type: ignore[arg-type]
    constrained = any(getattr(info, slot) is not None for slot in info.__struct_fields__)
    return None if constrained else _TESTS.get(type(info))


def event_check(cls: type[msgspec.Struct]) -> Callable[[Any], bool] | None:
    """For a Struct whose fields are all ints, strings, floats, bools or None (without
    msgspec constraints): a function proving that an instance decodes back equal,
    compiled once per class (as dataclasses compile `__init__`). None for other Structs:
    their instances are decoded and compared."""
    try:
        info = msgspec.inspect.type_info(cls)
    except Exception:  # the codec's own decoder reports what it cannot resolve
        return None
    if not isinstance(info, msgspec.inspect.StructType):
        return None
    tests = []
    for field in info.fields:
        test = _test(field.type)
        if test is None or not field.name.isidentifier() or keyword.iskeyword(field.name):
            return None
        tests.append(test.format(v=f"e.{field.name}"))
    source = "lambda e: " + (" and ".join(tests) or "True")
    check: Callable[[Any], bool] = eval(source, {})  # field names and _TESTS only
    return check


def type_label(value: object) -> str:
    """`datetime.datetime`, `decimal.Decimal`, `set`: the type as a user would import it."""
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _float(value: float, path: str) -> str | None:
    if math.isfinite(value):
        return None
    word = "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{word} at `{path}`: JSON has no NaN or infinity (it would be stored as null)"


def _nul(where: str) -> str:
    return (
        f"a NUL character {where}: PostgreSQL cannot store it in JSON or text, so neither "
        "engine takes it (send bytes in a typed event field, or escape it)"
    )


def _key(path: str, key: object) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def explain(value: object, back: object = _MISSING, path: str = "$") -> str | None:
    """The first part of `value` that would not come back as `back` (what decoding its JSON
    gave; left out, only what no engine can store is looked for), or None if there is none.

    A Struct, dict or list is compared part by part, so a Struct whose class turned off
    `==` (`eq=False`) is still judged by its fields."""
    if isinstance(value, float):
        found = _float(value, path)
        if found:
            return found
    elif isinstance(value, str):
        if "\x00" in value:
            return _nul(f"at `{path}`")
    same = back is not _MISSING and type(back) is type(value)
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            part = getattr(back, field) if same else _MISSING
            found = explain(getattr(value, field), part, f"{path}.{field}")
            if found:
                return found
        if same:
            return None
    elif isinstance(value, dict):
        target: dict[Any, Any] = back if same else {}  # type: ignore[assignment]
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return _nul(f"in a dict key at `{path}`")
            if isinstance(key, float) and _float(key, path):
                return f"dict key {key!r} at `{path}`: JSON has no NaN or infinity"
            if same and key not in target:
                return (
                    f"dict key {key!r} ({type_label(key)}) at `{path}` would come back as a "
                    "str: JSON object keys are strings"
                )
            found = explain(item, target.get(key, _MISSING), _key(path, key))
            if found:
                return found
        if same:
            return None
    elif isinstance(value, list | tuple | set | frozenset):
        ordered = same and isinstance(value, list | tuple) and len(back) == len(value)  # type: ignore[arg-type]
        for index, item in enumerate(value):
            part = back[index] if ordered else _MISSING  # type: ignore[index]
            found = explain(item, part, f"{path}[{index}]")
            if found:
                return found
        if ordered:
            return None
    if back is _MISSING or value == back:
        return None
    shown = repr(back)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{type_label(value)} at `{path}` would come back as {type_label(back)} {shown}"
