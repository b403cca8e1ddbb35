"""Who may change things (docs/adr/0023): nobody unless the dashboard was started with a
token; then whoever signs in with it, or sends it as `Authorization: Bearer <token>`.

Signing in sets a session cookie (HttpOnly, SameSite=Strict): a random nonce and its
HMAC under the token, so the cookie proves the token was given without holding it. Every
state-changing request carries a CSRF token, the HMAC of "csrf:" and that nonce, in a
form field or the X-CSRF-Token header, and is refused when its Origin names another
site. A bearer request needs neither: no browser sends that header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

COOKIE = "alkstore_session"


class Refused(Exception):
    """A state-changing request without the token, its session or its CSRF token."""


class Guard:
    def __init__(self, token: str | None) -> None:
        self._key = token.encode() if token else None

    @property
    def enabled(self) -> bool:
        """Actions are possible at all (the dashboard has a token)."""
        return self._key is not None

    def _mac(self, text: str) -> str:
        assert self._key is not None
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def check_token(self, given: str) -> bool:
        return self._key is not None and hmac.compare_digest(given.encode(), self._key)

    def new_session(self) -> str:
        """A cookie value for a browser that gave the token."""
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._mac('session:' + nonce)}"

    def session(self, request: Request) -> str | None:
        """The nonce of a valid session cookie (None: not signed in)."""
        if self._key is None:
            return None
        nonce, _, mac = request.cookies.get(COOKIE, "").partition(".")
        if nonce and hmac.compare_digest(mac, self._mac("session:" + nonce)):
            return nonce
        return None

    def csrf(self, request: Request) -> str | None:
        """The CSRF token the pages of a signed-in browser embed (None: no actions)."""
        nonce = self.session(request)
        return None if nonce is None else self._mac("csrf:" + nonce)

    def bearer(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.check_token(given.strip())

    def same_origin(self, request: Request) -> bool:
        """No Origin (or Referer) header, or one that names this very host."""
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == request.headers.get("host", "")

    def who(self, request: Request, fields: dict[str, str]) -> str:
        """Who makes this state-changing request; Refused unless it may."""
        client = request.client.host if request.client else "?"
        if not self.enabled:
            raise Refused("the dashboard is read-only: start it with --token to act")
        if self.bearer(request):
            return f"{client} (bearer token)"
        nonce = self.session(request)
        if nonce is None:
            raise Refused("sign in with the dashboard's token first")
        given = fields.get("csrf") or request.headers.get("x-csrf-token", "")
        expected = self._mac("csrf:" + nonce)
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise Refused("missing or wrong CSRF token: reload the page")
        if not self.same_origin(request):
            raise Refused("cross-site request refused")
        return f"{client} (session {nonce[:8]})"
