"""What keeps other web pages away from the playground: its page drives the real agent with the model key.

Any page the developer visits can send requests to ``127.0.0.1``: a "simple" cross-origin
POST (``text/plain`` or a form, no preflight) arrives with the page's ``Origin``, and a DNS
rebinding page reads answers under a name of its own that resolves to loopback. ``Guard``
is the page application's middleware, on every request:

- ``Host`` must be a loopback name (``localhost``, ``*.localhost``, a loopback address) or the
  address the playground was told to listen on (``HOST``); a name an attacker's DNS answers
  for never is. Otherwise 403.
- ``Origin``, when the browser sends one, must be the page's own (scheme, host and port).
- ``/api/…`` and ``/files/…`` need the per-start token: the ``X-Playground-Token`` header, or
  ``?token=`` where the browser cannot set a header (``EventSource``, a file link). The token
  is embedded in the served HTML, which only a same-origin page can read.
- A write (POST) must be ``application/json`` or the page's own ``multipart/form-data``; 415
  otherwise.

Every response carries a Content-Security-Policy that loads nothing from anywhere but the
playground itself (``CSP``), so neither the page nor what it renders fetches remote URLs.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from app.intake.signature import same_secret

log = logging.getLogger(__name__)

#: The header (or ``token`` query parameter) carrying the per-start token.
TOKEN_HEADER = "X-Playground-Token"
#: The page loads its own script and style only; connects only to itself; images only its own.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: Paths that need the token.
PROTECTED = ("/api/", "/files/")
#: Body types a write may have: the page sends JSON (clicks) and multipart forms (posts).
WRITE_TYPES = ("application/json", "multipart/form-data")
_WILDCARDS = ("", "0.0.0.0", "::")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refuse(status: type[web.HTTPException], error: str) -> web.HTTPException:
    return status(text=json.dumps({"error": error}), content_type="application/json")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``Host``/netloc as (lowercase host name, port or None); None when it does not parse."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def loopback_name(name: str) -> bool:
    """``name`` can only mean this machine: ``localhost``, ``*.localhost`` or a loopback address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """The middleware described in the module docstring; ``bind`` is the address the page listens on."""

    def __init__(self, token: str, bind: str) -> None:
        self.token = token
        self.bind = bind.strip("[]").lower()

    def host_allowed(self, name: str) -> bool:
        if loopback_name(name) or (name and name == self.bind):
            return True
        # Listening on every address (HOST=0.0.0.0): reached by an address, which no DNS answer rebinds.
        return self.bind in _WILDCARDS and _is_ip(name)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.check(request)
        response = await handler(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response

    def check(self, request: web.Request) -> None:
        """Raise the refusal ``request`` gets, if any."""
        host = _split_host(request.headers.get("Host", ""))
        if host is None or not self.host_allowed(host[0]):
            log.warning("playground: refused a request for host %r (not a loopback name)", request.host[:100])
            raise _refuse(web.HTTPForbidden, "this page answers only on a loopback name such as 127.0.0.1")
        origin = request.headers.get("Origin")
        if origin is not None and not self.own_origin(origin, host):
            log.warning("playground: refused a request from origin %r", origin[:100])
            raise _refuse(web.HTTPForbidden, "requests from other web pages are refused")
        if request.path.startswith(PROTECTED):
            given = request.headers.get(TOKEN_HEADER) or request.query.get("token") or ""
            if not same_secret(given, self.token):
                raise _refuse(web.HTTPForbidden, "missing or wrong playground token: reload the page")
        if request.method not in ("GET", "HEAD") and request.content_type not in WRITE_TYPES:
            raise _refuse(web.HTTPUnsupportedMediaType, "send application/json or the page's form")

    @staticmethod
    def own_origin(origin: str, host: tuple[str, int | None]) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return False  # "null" (a sandboxed frame, a file) among others
        got = _split_host(parts.netloc)
        default = 443 if parts.scheme == "https" else 80
        return got is not None and (got[0], got[1] or default) == (host[0], host[1] or 80)


__all__ = ["CSP", "TOKEN_HEADER", "Guard", "loopback_name"]
