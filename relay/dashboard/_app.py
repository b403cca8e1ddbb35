"""The dashboard's routes (docs/adr/0023): pages to read, and, with a token, actions.

Reading needs nothing (bind to 127.0.0.1, the default). A state-changing request is a
POST that passes `_auth.Guard.who`; bulk dead-letter operations first answer with a
confirmation that states the count, and act on the POST that confirms it. Every action is
logged on `alkstore.dashboard` with who, what and how many (`record.alkstore` too).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

import alkstore
from relay.cli import _show
from relay.dashboard import _auth, _html, _pages, _throughput

log = logging.getLogger("alkstore.dashboard")
HEADERS = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'"}
Endpoint = Callable[[Request], Awaitable[Response]]


class NotFound(Exception):
    """A path no page or action has."""


class Dashboard:
    def __init__(self, store: alkstore.Store, token: str | None) -> None:
        self.store = store
        self.guard = _auth.Guard(token)
        self.history = _pages.History()
        self.throughput = _throughput.Throughput()

    # -- reading ---------------------------------------------------------------------

    def render(self, request: Request, title: str, live: str, **options: Any) -> HTMLResponse:
        done = request.query_params.get("done")
        top = f"<p class=flash>{_html.e(done)}</p>" if done else ""
        page = _html.page(
            title,
            live,
            path=request.url.path,
            here=_html.url(request.url.path, **_polled(request)),
            session=self.session_box(request),
            top=top + options.pop("top", ""),
            **options,
        )
        return HTMLResponse(page, headers=HEADERS)

    def session_box(self, request: Request) -> str:
        if not self.guard.enabled:
            return "read-only"
        csrf = self.guard.csrf(request)
        if csrf is None:
            return '<a href="/login">sign in to act</a>'
        return (
            f'signed in <form method=post action="/logout"><input type=hidden name=csrf '
            f'value="{csrf}"><button>sign out</button></form>'
        )

    def overview(self, request: Request) -> HTMLResponse:
        csrf = self.guard.csrf(request)
        return self.render(
            request, "Overview", _pages.overview(self.store, self.history, csrf, self.throughput)
        )

    def queues(self, request: Request) -> HTMLResponse:
        live = _pages.queues_table(self.store, self.guard.csrf(request), self.throughput)
        return self.render(request, "Queues", live)

    def queue(self, request: Request) -> HTMLResponse:
        name = request.path_params["name"]
        state = request.query_params.get("state") or None
        after = _whole(request.query_params.get("after"))
        csrf = self.guard.csrf(request)
        live = _pages.queue(self.store, name, state, after, csrf, self.throughput)
        return self.render(request, f"Queue {name}", live)

    def job(self, request: Request) -> HTMLResponse:
        found = self.store.job(request.path_params["id"])
        if found is None:
            raise alkstore.JobNotFound(request.path_params["id"], None)
        live = _pages.job(found, self.guard.csrf(request))
        return self.render(request, f"Job {found.id}", live, refresh=False)

    def dead(self, request: Request) -> HTMLResponse:
        name = request.path_params["name"]
        query = request.query_params
        error, since_text = query.get("error") or None, query.get("since") or None
        top, live = _pages.dead(
            self.store,
            name,
            error,
            _since(self.store, since_text),
            since_text,
            _whole(query.get("after")),
            self.guard.csrf(request),
        )
        return self.render(
            request, f"Dead letters of {name}", live, top=top, hold_when_checked=True
        )

    def dead_queues(self, request: Request) -> HTMLResponse:
        return self.render(request, "Dead letters", _pages.dead_queues(self.store))

    def schedules(self, request: Request) -> HTMLResponse:
        live = _pages.schedules(self.store, self.guard.csrf(request))
        return self.render(request, "Schedules", live)

    def log(self, request: Request) -> HTMLResponse:
        query = request.query_params
        top, live = _pages.log(
            self.store,
            query.get("type") or None,
            query.get("key") or None,
            _whole(query.get("before")),
        )
        return self.render(request, "Log", live, top=top)

    def login_page(self, request: Request) -> HTMLResponse:
        if not self.guard.enabled:
            live = "<p>This dashboard is read-only: start it with --token to act.</p>"
        else:
            live = (
                '<form method=post action="/login"><input type=password name=token '
                'placeholder="the dashboard\'s token" autofocus> <button>sign in</button></form>'
            )
        return self.render(request, "Sign in", live, refresh=False)

    # -- acting ----------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        fields = await _form(request)
        if not self.guard.same_origin(request) or not self.guard.check_token(
            fields.get("token", "")
        ):
            log.warning("dashboard: refused sign-in from %s", _client(request))
            return _refused("wrong token" if self.guard.enabled else "the dashboard is read-only")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            _auth.COOKIE, self.guard.new_session(), httponly=True, samesite="strict"
        )
        log.info("dashboard: sign-in from %s", _client(request))
        return response

    async def logout(self, request: Request) -> Response:
        await self.acting(request)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(_auth.COOKIE)
        return response

    async def acting(self, request: Request, *actions: str) -> tuple[str, dict[str, list[str]]]:
        """(who, the form's fields): raises Refused unless this request may act (and
        NotFound for an action the route does not have)."""
        if actions and request.path_params.get("action") not in actions:
            raise NotFound(f"no such action: {request.path_params.get('action')!r}")
        fields = await _fields(request)
        who = self.guard.who(request, {k: v[0] for k, v in fields.items()})
        return who, fields

    def done(self, who: str, what: str, queue: str, n: int, back: str) -> Response:
        log.info(
            "dashboard: %s %s of %s: %d by %s",
            what,
            "job(s)",
            queue,
            n,
            who,
            extra={"alkstore": {"action": what, "queue": queue, "count": n, "who": who}},
        )
        return RedirectResponse(_html.url(back, done=f"{what}: {n} ({queue})"), status_code=303)

    async def queue_action(self, request: Request) -> Response:
        who, _ = await self.acting(request, "pause", "resume")
        name, what = request.path_params["name"], request.path_params["action"]
        q = self.store.queue(name)
        await run_in_threadpool(q.pause if what == "pause" else q.resume)
        return self.done(who, what, name, 1, f"/queues/{name}")

    async def job_action(self, request: Request) -> Response:
        who, _ = await self.acting(request, "retry", "cancel")
        job_id, what = request.path_params["id"], request.path_params["action"]
        found = await run_in_threadpool(self.store.job, job_id)
        if found is None:
            raise alkstore.JobNotFound(job_id, None)
        q = self.store.queue(found.queue)
        if what == "retry":
            await run_in_threadpool(q.retry, job_id)
            return self.done(who, what, found.queue, 1, f"/jobs/{job_id}")
        await run_in_threadpool(q.cancel, job_id)
        return self.done(who, what, found.queue, 1, f"/queues/{found.queue}")

    async def dead_action(self, request: Request) -> Response:
        who, fields = await self.acting(request, "requeue", "purge")
        name, what = request.path_params["name"], request.path_params["action"]
        q = self.store.queue(name)
        ids = [_whole(i) for i in fields.get("ids", [])]
        every = fields.get("all", [""])[0] == "1"
        error = fields.get("error", [""])[0] or None
        since_text = fields.get("since", [""])[0] or None
        since = await run_in_threadpool(_since, self.store, since_text)  # the store's clock
        if not every and not ids:
            raise alkstore.InvalidArgument("select dead letters, or all matching")
        if fields.get("confirm", [""])[0] != "1":
            n = (
                len(ids)
                if not every
                else await run_in_threadpool(lambda: q.count_dead(since=since, error=error))
            )
            return self.confirm(request, fields, what, name, n, every)
        if every:
            kwargs: dict[str, Any] = {"since": since, "error": error}
            if what == "purge" and since is None and error is None:
                kwargs = {}
                chosen: Any = "all"
            else:
                chosen = None
        else:
            chosen, kwargs = ids, {}
        act = q.requeue if what == "requeue" else q.purge_dead
        n = await run_in_threadpool(lambda: act(chosen, **kwargs))
        return self.done(who, what, name, n, f"/queues/{name}/dead")

    def confirm(
        self,
        request: Request,
        fields: dict[str, list[str]],
        what: str,
        name: str,
        n: int,
        every: bool,
    ) -> HTMLResponse:
        hidden = "".join(
            f'<input type=hidden name="{_html.e(k)}" value="{_html.e(v)}">'
            for k, values in fields.items()
            for v in values
        )
        chosen = "every dead letter matching the filter" if every else "the selected dead letters"
        live = (
            f"<p>{what.capitalize()} <b>{n:,}</b> dead letter{'s' if n != 1 else ''} of "
            f"<b>{_html.e(name)}</b> ({chosen})?</p>"
            f'<form method=post action="{_html.e(request.url.path)}">{hidden}'
            f'<button name=confirm value=1 class="{"danger" if what == "purge" else ""}">'
            f"{what} {n:,}</button> "
            f'<a href="{_html.e(_html.url(f"/queues/{name}/dead"))}">cancel</a></form>'
        )
        return self.render(request, "Confirm", live, refresh=False)

    async def schedule_action(self, request: Request) -> Response:
        who, _ = await self.acting(request, "pause", "resume", "run")
        name, what = request.path_params["name"], request.path_params["action"]
        schedules = self.store.schedules
        act = {"pause": schedules.pause, "resume": schedules.resume, "run": schedules.run_now}
        await run_in_threadpool(act[what], name)
        log.info(
            "dashboard: %s schedule %s by %s",
            what,
            name,
            who,
            extra={"alkstore": {"action": what, "schedule": name, "count": 1, "who": who}},
        )
        return RedirectResponse(_html.url("/schedules", done=f"{what}: {name}"), status_code=303)


def _polled(request: Request) -> dict[str, str]:
    """The page's query, for its live refresh: without the note of an action just done."""
    return {k: v for k, v in request.query_params.items() if k != "done"}


def _whole(text: str | None) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise alkstore.InvalidArgument(f"expected a whole number, got {text!r}")
    return int(text)


def _since(store: alkstore.Store, text: str | None) -> Any:
    try:
        return _show.since_value(store, text)
    except ValueError:
        raise alkstore.InvalidArgument(
            f"since must be an ISO 8601 time or a duration ago (2h, 7d), got {text!r}"
        ) from None


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


async def _fields(request: Request) -> dict[str, list[str]]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return parse_qs(body, keep_blank_values=True)


async def _form(request: Request) -> dict[str, str]:
    return {k: v[0] for k, v in (await _fields(request)).items()}


def _refused(message: str, status: int = 403) -> HTMLResponse:
    body = f"<!doctype html><title>refused</title><p>{_html.e(message)}</p>"
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _errors(handler: Callable[..., Any]) -> Endpoint:
    """A route's endpoint: the store's refusals become pages with the right status."""

    async def endpoint(request: Request) -> Response:
        try:
            if request.method == "GET":
                result: Response = await run_in_threadpool(handler, request)
            else:
                result = await handler(request)
            return result
        except _auth.Refused as exc:
            log.warning("dashboard: refused %s %s: %s", request.method, request.url.path, exc)
            return _refused(str(exc))
        except (alkstore.JobNotFound, NotFound) as exc:
            return _refused(str(exc), 404)
        except alkstore.JobRunning as exc:
            return _refused(str(exc), 409)
        except (alkstore.InvalidArgument, alkstore.InvalidName) as exc:
            return _refused(str(exc), 400)

    return endpoint


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name != "htmx.min.js":
        return Response(status_code=404)
    text = resources.files("relay.dashboard").joinpath("static", name).read_bytes()
    headers = {"cache-control": "max-age=86400"}
    return Response(text, media_type="text/javascript", headers=headers)


def create_app(
    store: alkstore.Store, *, token: str | None = None, allowed_hosts: list[str] | None = None
) -> Starlette:
    """The dashboard as an ASGI app over `store`; read-only without `token`.
    `allowed_hosts`: Host headers to accept (against DNS rebinding; None: any)."""
    d = Dashboard(store, token)
    act = ("POST",)
    routes = [
        Route("/", _errors(d.overview)),
        Route("/queues", _errors(d.queues)),
        Route("/queues/{name:path}/dead/{action:str}", _errors(d.dead_action), methods=act),
        Route("/queues/{name:path}/dead", _errors(d.dead)),
        Route("/queues/{name:path}/{action:str}", _errors(d.queue_action), methods=act),
        Route("/queues/{name:path}", _errors(d.queue)),
        Route("/dead", _errors(d.dead_queues)),
        Route("/jobs/{id:int}", _errors(d.job)),
        Route("/jobs/{id:int}/{action:str}", _errors(d.job_action), methods=act),
        Route("/schedules", _errors(d.schedules)),
        Route("/schedules/{name:path}/{action:str}", _errors(d.schedule_action), methods=act),
        Route("/log", _errors(d.log)),
        Route("/login", _errors(d.login_page)),
        Route("/login", _errors(d.login), methods=act),
        Route("/logout", _errors(d.logout), methods=act),
        Route("/static/{name:str}", _static),
    ]
    middleware = []
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware)
