"""`alkstore dashboard`: the web dashboard (docs/adr/0023), from the optional extra
`alkstore[dashboard]` (Starlette and uvicorn)."""

from __future__ import annotations

import argparse
import os
from typing import Any

import alkstore
from relay.cli._commands import UsageError
from relay.cli._parser import port

TOKEN_ENV = "ALKSTORE_DASHBOARD_TOKEN"


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    web = commands.add_parser(
        "dashboard", parents=[common], help="serve the web dashboard (alkstore[dashboard])"
    )
    web.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    web.add_argument("--port", type=port, default=8080, help="TCP port (default: 8080)")
    web.add_argument(
        "--token",
        help=f"allow actions to whoever signs in with this token (or ${TOKEN_ENV}; "
        "default: none, read-only)",
    )


def dashboard(store: alkstore.Store, args: argparse.Namespace) -> int:
    try:
        from relay import dashboard as web
    except ImportError as exc:
        raise UsageError(
            f"the dashboard needs its extra: pip install 'alkstore[dashboard]' ({exc})"
        ) from None
    from relay.cli import _processes

    _processes.logs(0)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    web.serve(store, host=args.host, port=args.port, token=token)
    return 0


COMMANDS = {"dashboard": dashboard}
