"""HTML for the dashboard: escaping, the page around every view, small figures
(docs/adr/0023). Server-rendered; htmx (vendored in static/) re-fetches a page's `#live`
part every REFRESH seconds and swaps it in, so nothing here needs a build step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from urllib.parse import urlencode

REFRESH = 2  # seconds between live refreshes
NAV = (
    ("/", "Overview"),
    ("/queues", "Queues"),
    ("/dead", "Dead letters"),
    ("/schedules", "Schedules"),
    ("/log", "Log"),
)

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9}
header{background:#1d2433;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .who{margin-left:auto;font-size:12px;color:#9aa4b8}header form{display:inline}
main{padding:1em 1.4em;max-width:1200px}h1{font-size:20px;margin:.2em 0 .6em}
h2{font-size:15px;margin:1.2em 0 .4em}table{border-collapse:collapse;background:#fff;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{font-weight:600;color:#55607a;font-size:12px}.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#fff;border:1px solid #e3e6eb;padding:.6em;overflow:auto;max-height:24em}
.tag{display:inline-block;padding:0 .4em;border-radius:3px;font-size:12px;background:#e3e6eb}
.paused,.dead{background:#f9d9d6}.ok{background:#d7f0dd}
.flash{background:#fff6d6;padding:.5em;border:1px solid #eedc8a}
button{font:inherit;padding:.15em .7em;cursor:pointer}button.danger{color:#a1251b}
form.inline{display:inline}.muted{color:#7a849a}.row{display:flex;gap:2em;flex-wrap:wrap}
.card{background:#fff;border:1px solid #e3e6eb;padding:.6em 1em;min-width:10em}
.card b{display:block;font-size:22px}
input[type=text],input[type=password]{font:inherit;padding:.15em .4em}
"""


def e(value: object) -> str:
    """Text escaped for HTML content and attribute values."""
    return escape("" if value is None else str(value), quote=True)


def url(path: str, **query: object) -> str:
    """A path with the query parameters that have a value."""
    given = {k: v for k, v in query.items() if v not in (None, "", 0, False)}
    return path + ("?" + urlencode(given) if given else "")


def page(
    title: str,
    live: str,
    *,
    path: str,
    here: str,
    session: str,
    refresh: bool = True,
    hold_when_checked: bool = False,
    top: str = "",
) -> str:
    """A whole page: its `live` part refreshes itself every REFRESH seconds (not while a
    box in it is ticked, with `hold_when_checked`: a selection is not swept away)."""
    nav = "".join(
        f'<a href="{href}"{" class=on" if href == path else ""}>{name}</a>' for href, name in NAV
    )
    trigger = f"every {REFRESH}s"
    if hold_when_checked:
        trigger += " [!document.querySelector('#live input:checked')]"
    poll = (
        f' hx-get="{e(here)}" hx-trigger="{e(trigger)}" hx-select="#live" hx-swap="outerHTML"'
        if refresh
        else ""
    )
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<title>{e(title)} · alkstore</title><link rel=icon href="data:,"><style>{STYLE}</style>'
        f'<script src="/static/htmx.min.js"></script></head><body>'
        f"<header><b>alkstore</b>{nav}<span class=who>{session}</span></header>"
        f'<main><h1>{e(title)}</h1>{top}<div id="live"{poll}>{live}</div></main></body></html>'
    )


def table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table of cells already rendered (escape what goes in)."""
    th = "".join(
        f"<th class=n>{h}</th>" if i in numeric else f"<th>{h}</th>" for i, h in enumerate(head)
    )
    body = []
    for row in rows:
        cells = "".join(
            f"<td class=n>{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(head)}" class=muted>none</td></tr>')
    return f"<table><tr>{th}</tr>{''.join(body)}</table>"


def count(value: int, estimated: bool = False) -> str:
    return f"≈{value:,}" if estimated else f"{value:,}"


def ago(seconds: float | None) -> str:
    """12s, 4m, 3h, 2d: an age as a person reads it ('' for none)."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"


def when(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return e(moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


def sparkline(values: Sequence[float], width: int = 120, height: int = 24) -> str:
    """An inline SVG line of the values, oldest first (empty under two points)."""
    if len(values) < 2:
        return ""
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(values)
    )
    return (
        f'<svg width="{width}" height="{height}" class=spark aria-hidden=true>'
        f'<polyline fill=none stroke="#3d6ee0" stroke-width=1.5 points="{points}"/></svg>'
    )


def button(
    action: str,
    label: str,
    csrf: str | None,
    fields: dict[str, object] | None = None,
    danger: bool = False,
) -> str:
    """A one-button form that POSTs to `action` (nothing without a CSRF token: read-only)."""
    if csrf is None:
        return ""
    hidden = "".join(
        f'<input type=hidden name="{e(k)}" value="{e(v)}">' for k, v in (fields or {}).items()
    )
    cls = " class=danger" if danger else ""
    return (
        f'<form class=inline method=post action="{e(action)}">'
        f'<input type=hidden name=csrf value="{e(csrf)}">{hidden}'
        f"<button{cls}>{e(label)}</button></form>"
    )
