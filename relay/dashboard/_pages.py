"""What each page shows (docs/adr/0023): the `#live` part of the overview, queues, a
queue's jobs, a job, dead letters, schedules and the log, rendered from the store's
public and operator API. Counts that would read every job are estimated at scale
(`queues(estimate=True)`), jobs are paged by id (keyset: `after`), never counted."""

from __future__ import annotations

import threading
import time
from collections import deque
from fnmatch import fnmatchcase
from typing import Any

import msgspec

import alkstore
from relay.dashboard import _throughput
from relay.dashboard._html import ago, button, count, e, sparkline, table, url, when

PAGE = 50  # jobs, dead letters or events per page
LOG_WINDOW = 2_000  # the log page filters this many positions at a time


class History:
    """The log head and each subscription's lag, sampled as the overview refreshes (at
    most every `every` seconds; the last `keep` samples): the append rate and sparklines."""

    def __init__(self, every: float = 2.0, keep: int = 150) -> None:
        self._lock = threading.Lock()
        self._every = every
        self.samples: deque[tuple[float, int, dict[str, int]]] = deque(maxlen=keep)

    def add(self, head: int, lag: dict[str, int]) -> None:
        now = time.monotonic()
        with self._lock:
            if not self.samples or now - self.samples[-1][0] >= self._every:
                self.samples.append((now, head, lag))

    def rate(self) -> float | None:
        """Events appended per second over the samples of the last minute."""
        with self._lock:
            recent = [s for s in self.samples if s[0] >= time.monotonic() - 60]
        if len(recent) < 2 or recent[-1][0] == recent[0][0]:
            return None
        return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])

    def lag(self, queue: str) -> list[float]:
        with self._lock:
            return [float(s[2].get(queue, 0)) for s in self.samples]


def queues_table(store: alkstore.Store, csrf: str | None, speed: _throughput.Throughput) -> str:
    rates = speed.update(store.workers())
    listed = store.queues(estimate=True)
    names = {q.name for q in listed}  # a queue its workers emptied is no longer listed
    empty = [  # (a paused one is: it has a row); it still has a rate
        alkstore.QueueInfo(name=n, paused=False, ready=0, scheduled=0, running=0, dead=0)
        for n in rates
        if n not in names
    ]
    rows = []
    for q in sorted(listed + empty, key=lambda q: q.name.encode()):
        state = "<span class='tag paused'>paused</span>" if q.paused else ""
        toggle = f"/queues/{q.name}/" + ("resume" if q.paused else "pause")
        act = button(toggle, "resume" if q.paused else "pause", csrf)
        rows.append(
            (
                f'<a href="{e(url("/queues/" + q.name))}">{e(q.name)}</a> {state}',
                count(q.ready, q.estimated),
                count(q.scheduled, q.estimated),
                count(q.running),
                f'<a href="{e(url(f"/queues/{q.name}/dead"))}">{count(q.dead, q.estimated)}</a>',
                ago(q.oldest_ready_age),
                _throughput.cell(rates.get(q.name), q.name in rates),
                act,
            )
        )
    head = ("queue", "ready", "scheduled", "running", "dead", "oldest ready", "done (1 min)", "")
    return table(head, rows, numeric=(1, 2, 3, 4, 5, 6))


def dead_queues(store: alkstore.Store) -> str:
    """Every queue that has dead letters, with their count: the way into each one's."""
    rows = (
        (
            f'<a href="{e(url(f"/queues/{q.name}/dead"))}">{e(q.name)}</a>',
            count(q.dead, q.estimated),
        )
        for q in store.queues(estimate=True)
        if q.dead
    )
    return table(("queue", "dead letters"), rows, numeric=(1,))


def overview(
    store: alkstore.Store, history: History, csrf: str | None, speed: _throughput.Throughput
) -> str:
    status = store.status(queues=False)
    history.add(status.head, {lag.queue: lag.events for lag in status.subscriptions})
    rate = history.rate()
    cards = [
        ("log head", f"{status.head:,}"),
        ("appended / s", "…" if rate is None else f"{rate:,.1f}"),
        ("live workers", str(sum(w.alive for w in status.workers))),
    ]
    top = "".join(f"<div class=card>{name}<b>{value}</b></div>" for name, value in cards)
    lags = table(
        ("subscription", "checkpoint", "behind (events)", "behind (age)", "last minutes"),
        (
            (
                e(lag.queue),
                f"{lag.checkpoint:,}",
                f"{lag.events:,}",
                ago(lag.seconds) or "caught up",
                sparkline(history.lag(lag.queue)),
            )
            for lag in status.subscriptions
        ),
        numeric=(1, 2),
    )
    leaders = table(
        ("role", "holder", "state"),
        (
            (
                e(lead.role),
                e(lead.holder or "none"),
                "<span class='tag ok'>active</span>" if lead.active else "inactive",
            )
            for lead in status.leaders
        ),
    )
    workers = table(
        ("worker", "queues", "concurrency", "started", "last seen"),
        (
            (
                e(f"{w.host}:{w.pid}") + ("" if w.alive else " <span class='tag dead'>dead</span>"),
                e(", ".join(w.queues)),
                str(w.concurrency),
                when(w.started_at),
                ago(w.seen_ago) + " ago",
            )
            for w in status.workers
        ),
    )
    return (
        f"<div class=row>{top}</div><h2>Queues</h2>{queues_table(store, csrf, speed)}"
        f"<h2>Relay lag</h2>{lags}<h2>Leaders</h2>{leaders}<h2>Workers</h2>{workers}"
    )


def queue(
    store: alkstore.Store,
    name: str,
    state: str | None,
    after: int,
    csrf: str | None,
    speed: _throughput.Throughput,
) -> str:
    q = store.queue(name)
    info = q.info(estimate=True)
    rates = speed.update(store.workers())
    jobs = q.jobs(state=state, limit=PAGE, after=after)  # type: ignore[arg-type]
    est = info.estimated
    cards = (
        ("ready", count(info.ready, est)),
        ("scheduled", count(info.scheduled, est)),
        ("running", count(info.running)),
        ("dead", f'<a href="{e(url(f"/queues/{name}/dead"))}">{count(info.dead, est)}</a>'),
        ("oldest ready", ago(info.oldest_ready_age) or "none"),
        *_throughput.cards(rates.get(name), name in rates),
    )
    top = "".join(f"<div class=card>{k}<b>{v}</b></div>" for k, v in cards)
    toggle = button(
        f"/queues/{name}/" + ("resume" if info.paused else "pause"),
        "resume" if info.paused else "pause",
        csrf,
    )
    paused = "<span class='tag paused'>paused</span> " if info.paused else ""
    states = " · ".join(
        f'<a href="{e(url("/queues/" + name, state=s))}">'
        + (f"<b>{s or 'all'}</b>" if s == state else (s or "all"))
        + "</a>"
        for s in (None, "ready", "scheduled", "running", "expired")
    )
    rows = (
        (
            f'<a href="/jobs/{j.id}">{j.id}</a>',
            f"<span class=tag>{e(j.state)}</span>",
            e(j.type or "(plain)"),
            e(j.key or ""),
            str(j.priority),
            f"{j.attempts}/{j.max_attempts}",
            when(j.visible_at),
            e(j.last_error or ""),
        )
        for j in jobs
    )
    more = ""
    if len(jobs) == PAGE:
        nxt = url("/queues/" + name, state=state, after=jobs[-1].id)
        more = f'<p><a href="{e(nxt)}">next {PAGE} →</a></p>'
    if after:
        more += f'<p><a href="{e(url("/queues/" + name, state=state))}">← first page</a></p>'
    jobs_table = table(
        ("id", "state", "type", "key", "priority", "attempts", "visible at", "last error"),
        rows,
        numeric=(4,),
    )
    return f"<div class=row>{top}</div><p>{paused}{toggle}</p><p>{states}</p>{jobs_table}{more}"


def payload(raw: str | bytes) -> str:
    """Stored JSON, indented (as stored if it does not parse)."""
    try:
        return e(msgspec.json.format(_text(raw), indent=2))
    except msgspec.DecodeError:
        return e(_text(raw))


def job(found: alkstore.JobInfo | alkstore.DeadLetter, csrf: str | None) -> str:
    facts: list[tuple[str, str]] = [
        ("queue", f'<a href="/queues/{e(found.queue)}">{e(found.queue)}</a>'),
        ("state", f"<span class='tag {e(found.state)}'>{e(found.state)}</span>"),
        ("type", e(found.type or "(plain payload)")),
        ("key", e(found.key or "")),
        ("log position", e(found.position or "")),
        ("priority", str(found.priority)),
        ("attempts", f"{found.attempts} of {found.max_attempts}"),
        ("enqueued", when(found.enqueued_at)),
    ]
    ids = {"ids": found.id}
    if isinstance(found, alkstore.DeadLetter):
        facts += [("died", when(found.died_at)), ("reason", e(found.reason))]
        acts = button(f"/queues/{found.queue}/dead/requeue", "requeue", csrf, ids) + button(
            f"/queues/{found.queue}/dead/purge", "purge", csrf, ids, danger=True
        )
    else:
        facts += [("visible at", when(found.visible_at)), ("expires", when(found.expires_at))]
        acts = button(f"/jobs/{found.id}/retry", "retry now", csrf) + button(
            f"/jobs/{found.id}/cancel", "cancel", csrf, danger=True
        )
    history = table(
        ("attempt", "at", "error"),
        ((str(a.attempt), when(alkstore_time(a.at)), e(a.error)) for a in found.history),
    )
    headers = table(("header", "value"), ((e(k), e(v)) for k, v in found.headers.items()))
    return (
        f"{table(('', ''), facts)}<p>{acts}</p><h2>Payload</h2><pre>{payload(found.raw)}</pre>"
        f"<h2>Headers</h2>{headers}<h2>Attempts</h2>{history}"
    )


def _text(raw: str | bytes) -> str:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def alkstore_time(ms: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC)


def dead(
    store: alkstore.Store,
    name: str,
    error: str | None,
    since: Any,
    since_text: str | None,
    after: int,
    csrf: str | None,
) -> tuple[str, str]:
    """(the filter form, the live part)."""
    q = store.queue(name)
    letters = q.dead_letters(limit=PAGE, after=after, since=since, error=error)
    filters = (
        f'<form method=get><input type=text name=error placeholder="error (regular expression)" '
        f'value="{e(error or "")}"> <input type=text name=since placeholder="since (2h, ISO time)" '
        f'value="{e(since_text or "")}"> <button>filter</button></form>'
    )
    boxes = csrf is not None
    rows = (
        (
            (f'<input type=checkbox name=ids value="{d.id}" form=selection> ' if boxes else "")
            + f'<a href="/jobs/{d.id}">{d.id}</a>',
            e(d.type or "(plain)"),
            e(d.key or ""),
            f"{d.attempts}/{d.max_attempts}",
            when(d.died_at),
            e(d.reason),
        )
        for d in letters
    )
    listing = table(("id", "type", "key", "attempts", "died", "reason"), rows)
    more = ""
    if len(letters) == PAGE:
        nxt = url(f"/queues/{name}/dead", error=error, since=since_text, after=letters[-1].id)
        more = f'<p><a href="{e(nxt)}">next {PAGE} →</a></p>'
    acts = ""
    if boxes and letters:
        base = f"/queues/{name}/dead"
        keep = (
            f'<input type=hidden name=csrf value="{e(csrf)}">'
            f'<input type=hidden name=error value="{e(error or "")}">'
            f'<input type=hidden name=since value="{e(since_text or "")}">'
        )
        acts = (
            f'<form id=selection method=post action="{base}/requeue">{keep}'
            f"<button>requeue selected</button> "
            f'<button formaction="{base}/purge" class=danger>purge selected</button> '
            f"<button name=all value=1>requeue all matching</button> "
            f'<button name=all value=1 formaction="{base}/purge" class=danger>'
            f"purge all matching</button></form>"
        )
    return filters, f"<p>{acts}</p>{listing}{more}"


def schedules(store: alkstore.Store, csrf: str | None) -> str:
    rows = []
    for s in store.schedules.list():
        every = "" if s.every_ms is None else ago(s.every_ms / 1000)
        last = None if s.last_fired is None else alkstore_time(s.last_fired)
        toggle = button(
            f"/schedules/{s.name}/" + ("resume" if s.paused else "pause"),
            "resume" if s.paused else "pause",
            csrf,
        ) + button(f"/schedules/{s.name}/run", "run now", csrf)
        rows.append(
            (
                e(s.name) + (" <span class='tag paused'>paused</span>" if s.paused else ""),
                e(s.cron or f"every {every}"),
                e(s.tz),
                e(s.event_type),
                "" if s.paused else when(s.next_fire_time),
                when(last),
                toggle,
            )
        )
    head = ("schedule", "when", "tz", "event", "next fire", "last fire", "")
    return table(head, rows)


def log(
    store: alkstore.Store, type_glob: str | None, key: str | None, before: int = 0
) -> tuple[str, str]:
    """(the filter form, the live part): the newest events matching the filters among
    the LOG_WINDOW positions up to `before` (0: the head), newest first; "older" pages
    back a window (or a page) at a time."""
    top = before or store.log.head()
    after = max(0, top - LOG_WINDOW)
    entries = store.log.read(after=after, limit=top - after) if top > after else []
    chosen = [
        entry
        for entry in reversed(entries)
        if (not type_glob or fnmatchcase(entry.type, type_glob)) and (not key or entry.key == key)
    ][:PAGE]
    older = chosen[-1].position - 1 if len(chosen) == PAGE else after
    links = f"positions {after + 1:,} to {top:,}"
    if older > 0:
        back = url("/log", type=type_glob, key=key, before=older)
        links += f' · <a href="{e(back)}">older →</a>'
    if before:
        links += f' · <a href="{e(url("/log", type=type_glob, key=key))}">newest</a>'
    form = (
        f'<form method=get><input type=text name=type placeholder="type (order.*)" '
        f'value="{e(type_glob or "")}"> <input type=text name=key placeholder=key '
        f'value="{e(key or "")}"> <button>filter</button></form>'
    )
    rows = (
        (
            str(entry.position),
            e(entry.type),
            e(entry.key or ""),
            when(entry.appended_at),
            f"<code>{e(_text(entry.raw)[:200])}</code>",
        )
        for entry in chosen
    )
    listing = table(("position", "type", "key", "appended", "payload"), rows, numeric=(0,))
    return form, f"{listing}<p class=muted>{links}</p>"
