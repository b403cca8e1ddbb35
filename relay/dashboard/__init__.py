"""The web dashboard: `alkstore dashboard` (docs/adr/0023; `pip install 'alkstore[dashboard]'`).

`create_app(store, token=...)` is the ASGI app (Starlette); `serve(...)` runs it with
uvicorn. Read-only without a token; with one, a browser signs in and every action is
CSRF-protected and logged on `alkstore.dashboard`."""

from __future__ import annotations

import ipaddress
import logging

import alkstore
from relay.dashboard._app import create_app

log = logging.getLogger("alkstore.dashboard")
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    store: alkstore.Store, host: str = "127.0.0.1", port: int = 8080, token: str | None = None
) -> None:
    """Serve the dashboard until interrupted. On a loopback address only requests naming
    a loopback host are answered (a page of another site cannot rebind its name to it)."""
    import uvicorn

    hosts = LOOPBACK_HOSTS if loopback(host) else None
    if not loopback(host) and token is None:
        log.warning("dashboard on %s without a token: read-only, but readable by all", host)
    app = create_app(store, token=token, allowed_hosts=hosts)
    log.info(
        "dashboard on http://%s:%d (%s)",
        host,
        port,
        "actions need the token" if token else "read-only",
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


__all__ = ["LOOPBACK_HOSTS", "create_app", "serve"]
