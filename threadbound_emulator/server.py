"""``FakeSlack``: a workspace served over real HTTP on 127.0.0.1 (Web API and file host).

The Web API answers like Slack's: HTTP 200 with ``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``, parameters as form, query or JSON, the bearer
token and the method's scope checked on every call. Every call is recorded in
``calls`` (``count`` / ``calls_to`` read them back), every file GET in
``file_requests``. Faults per method come from ``threadbound_emulator.faults``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .api import METHODS, Method
from .faults import Fault, Faults, RateLimit, drop_connection, pause
from .filehost import FileHost, FileRequest
from .socket_mode import LINK_PATH, SocketMode
from .wire import JSON, Params, SlackError
from .workspace import Workspace

#: The Web API method that opens a Socket Mode connection (``threadbound_emulator.socket_mode``).
SOCKET_OPEN = "apps.connections.open"
#: Where the emulator's response URLs point (``FakeSlack.response_url``).
RESPONSE_PATH = "/response/"


@dataclass
class Call:
    """One Web API call as the fake received it (``token`` removed from ``params``)."""

    method: str
    params: dict[str, Any]
    #: The JSON answer (``None`` while the call is held, or if it was dropped before answering).
    response: JSON | None = None
    #: The call was handled: answered, failed or dropped (not while it is held).
    handled: bool = False


class FakeSlack(Workspace):
    """A Slack workspace served over real HTTP; see the module docstring.

    Point ``slack_sdk``'s ``AsyncWebClient(base_url=slack.api_url)`` (the app's
    ``SLACK_API_URL``) at it, and put ``files_origin`` in ``SLACK_FILE_ORIGINS``.
    """

    def __init__(
        self,
        token: str = "xoxb-test",
        scopes: Iterable[str] | None = None,
        *,
        app_token: str = "xapp-1-A1-1-test",
        **identity: str,
    ) -> None:
        """``identity``: the bot's and the install's IDs and the bot's name, as ``Workspace`` takes them."""
        super().__init__(token, scopes, **identity)
        #: The app-level token (``xapp-…``) ``apps.connections.open`` takes.
        self.app_token = app_token
        #: Socket Mode: ``apps.connections.open``'s WebSocket and the envelopes sent over it.
        self.socket = SocketMode(self.app_id)
        self.calls: list[Call] = []
        self._observers: list[Callable[[Call], object]] = []
        self._after: list[Callable[[Call], object]] = []
        #: Set (and replaced) whenever a call has been handled, to wake ``wait_for_calls``.
        self._handled = asyncio.Event()
        self.faults = Faults()
        #: Writes cut off by a ``late`` fault and not yet applied (``settle_late`` waits for them).
        self._late: set[asyncio.Task[None]] = set()
        #: Calls a ``late`` fault applied after their connection was cut, in the order applied.
        self.applied_late: list[Call] = []
        #: Per-channel rate limits by method (``rate_limit``).
        self.rate_limits: dict[str, RateLimit] = {}
        self._host = FileHost(self)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeSlack:
        """Start serving on 127.0.0.1 with an OS-chosen port."""
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get(LINK_PATH, self.socket.handle)
        app.router.add_post(f"{RESPONSE_PATH}{{key}}", self._response)
        self._host.add_routes(app.router)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        self.socket.base_url = f"http://127.0.0.1:{self._port}"
        self.serve_files_at(f"http://127.0.0.1:{self._port}", f"http://localhost:{self._port}")
        return self

    async def stop(self) -> None:
        """Release every hold, forget late writes not yet applied, close the server and its connections."""
        self.faults.release_all()
        for task in list(self._late):
            task.cancel()
        await asyncio.gather(*self._late, return_exceptions=True)
        await self.socket.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeSlack is not started")
        return self._port

    @property
    def api_url(self) -> str:
        """Web API base URL, with the trailing slash slack_sdk expects."""
        return f"http://127.0.0.1:{self.port}/api/"

    def web_client(self, token: str | None = None, **kwargs: Any) -> Any:
        """An ``AsyncWebClient`` pointed at this fake (``kwargs`` passed through)."""
        from slack_sdk.web.async_client import AsyncWebClient

        return AsyncWebClient(token=token or self.token, base_url=self.api_url, **kwargs)

    def response_url(self) -> str:
        """A fresh ``response_url`` for an interaction or slash command: what the app posts to it
        lands in ``responses``, in order (Slack shows it to that person only)."""
        return f"http://127.0.0.1:{self.port}{RESPONSE_PATH}{uuid.uuid4().hex}"

    async def _response(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.Response(status=400, text="invalid_payload")
        said = isinstance(body, dict) and any(body.get(k) for k in ("text", "blocks", "delete_original"))
        if not said:
            return web.Response(status=400, text="no_text")
        self.responses.append((str(request.url), body))
        for callback in self._after:
            callback(Call("response_url", {"url": str(request.url)}, body, True))
        return web.Response(text="ok")

    def responses_to(self, url: str) -> list[JSON]:
        """What the app posted to one ``response_url``, in order."""
        return [body for to, body in self.responses if to == url]

    # ------------------------------------------------------------------ inspection

    @property
    def file_requests(self) -> list[FileRequest]:
        """Every request the file host received, in order."""
        return self._host.requests

    def count(self, method: str) -> int:
        """How many calls of ``method`` arrived (failed, dropped and held ones included)."""
        return sum(1 for call in self.calls if call.method == method)

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in arrival order."""
        return [call for call in self.calls if call.method == method]

    def observe(self, callback: Callable[[Call], object]) -> None:
        """Call ``callback(call)`` as each Web API call arrives, before it is handled."""
        self._observers.append(callback)

    def on_handled(self, callback: Callable[[Call], object]) -> None:
        """Call ``callback(call)`` after each Web API call was handled (its effects applied, or
        refused): the playground's cue that the workspace may have changed."""
        self._after.append(callback)

    async def wait_for_calls(self, method: str, count: int = 1) -> list[Call]:
        """Wait until ``count`` calls of ``method`` have been handled (answered, failed or
        dropped); returns every handled call of ``method``. Bound it with ``asyncio.timeout``."""
        while True:
            handled = [c for c in self.calls_to(method) if c.handled]
            if len(handled) >= count:
                return handled
            await self._handled.wait()

    def _done(self, call: Call) -> None:
        call.handled = True
        self._handled.set()
        self._handled = asyncio.Event()
        for callback in self._after:
            callback(call)

    # ------------------------------------------------------------------ faults

    def fail(
        self,
        method: str,
        error: str = "ratelimited",
        status: int | None = None,
        retry_after: int | None = 1,
        times: int | None = 1,
        *,
        applied: bool = False,
        html: bool = False,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (``None``: all of them) with ``error``.

        ``status`` defaults to 429 for ``ratelimited`` (with ``Retry-After``), else 200.
        Nothing is applied for a failed call unless ``applied`` (the work is done, then the error
        answered: an ambiguous outcome); ``html`` answers an HTML page (a proxy's 502) instead of
        JSON. Faults queue per method, in order.
        """
        if status is None:
            status = 429 if error == "ratelimited" else 200
        retry = retry_after if status == 429 else None
        self.faults.add(method, Fault("fail", times, status, error, retry, applied=applied, html=html))

    def drop(self, method: str, times: int | None = 1) -> None:
        """Apply the next ``times`` calls of ``method``, then close the connection unanswered
        (the client sees ``ServerDisconnectedError``: a post happened, the answer was lost)."""
        self.faults.add(method, Fault("drop", times))

    def delay(self, method: str, seconds: float, times: int | None = 1) -> None:
        """Wait ``seconds`` before handling the next ``times`` calls of ``method``."""
        self.faults.add(method, Fault("delay", times, seconds=seconds))

    def late(self, method: str, seconds: float, times: int | None = 1) -> None:
        """Cut the connection of the next ``times`` calls of ``method`` at once, unanswered, and apply
        each ``seconds`` later (the client sees ``ServerDisconnectedError``; the write shows up after)."""
        self.faults.add(method, Fault("late", times, seconds=seconds))

    @property
    def pending_late(self) -> int:
        """Late writes not yet applied."""
        return len(self._late)

    async def settle_late(self) -> None:
        """Wait until every write a ``late`` fault cut off has been applied."""
        while self._late:
            await asyncio.gather(*self._late, return_exceptions=True)

    def rate_limit(
        self,
        methods: Iterable[str] = ("chat.postMessage", "chat.startStream"),
        per_second: float = 1.0,
        burst: int = 1,
    ) -> RateLimit:
        """From now on, calls of ``methods`` (one shared budget: every new message counts) beyond
        ``per_second`` per channel, after a burst of ``burst``, are answered 429 with ``Retry-After``
        and do nothing, like Slack's limit of about one post per second per channel. The returned
        limit's ``refused`` counts the 429s per channel."""
        limit = RateLimit(per_second, burst)
        for method in methods:
            self.rate_limits[method] = limit
        return limit

    def clear_faults(self, method: str | None = None) -> None:
        """Forget pending ``fail``/``drop``/``delay`` faults (of one method, or all)."""
        self.faults.clear(method)

    def hold(self, method: str) -> asyncio.Event:
        """From now on, apply calls of ``method`` and keep their answers back until
        ``release(method)``. Returns the event set when the first held call was applied."""
        return self.faults.hold(method)

    def held(self, method: str) -> asyncio.Event:
        """The event set once a call of ``method`` is being held (``hold`` must be active)."""
        return self.faults.held(method)

    def release(self, method: str) -> None:
        """Let every held call of ``method`` answer, and stop holding new ones."""
        self.faults.release(method)

    # ------------------------------------------------------------------ HTTP: Web API

    async def _params(self, request: web.Request) -> Params:
        params: Params = dict(request.query)
        if request.can_read_body:
            ctype = request.content_type
            if ctype == "application/json":
                try:
                    body = await request.json()
                except json.JSONDecodeError:
                    body = None
                if isinstance(body, dict):
                    params.update(body)
            elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                for key, value in form.items():
                    if isinstance(value, str):
                        params[key] = value
            else:
                await request.read()
        return params

    def _answer(
        self, call: Call, body: JSON, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        call.response = body
        all_headers = {"x-oauth-scopes": ",".join(self.scopes)}
        all_headers.update(headers or {})
        return web.json_response(body, status=status, headers=all_headers)

    def _fail(self, call: Call, fault: Fault) -> web.Response:
        """A scripted failure's answer: Slack's JSON error, or a proxy's HTML page."""
        if fault.html:
            call.response = {"ok": False, "error": "html"}
            page = f"<html><body><h1>{fault.status} {fault.error or 'Bad Gateway'}</h1></body></html>"
            return web.Response(text=page, status=fault.status, content_type="text/html")
        return self._answer(call, {"ok": False, "error": fault.error}, fault.status, fault.headers())

    async def _api(self, request: web.Request) -> web.StreamResponse:
        call = Call(request.match_info["method"], {})
        try:
            return await self._handle(request, call)
        finally:
            self._done(call)

    async def _handle(self, request: web.Request, call: Call) -> web.StreamResponse:
        name = call.method
        params = await self._params(request)
        token = params.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[len("Bearer ") :]
        call.params = params
        self.calls.append(call)
        for observer in self._observers:
            observer(call)
        # apps.connections.open takes the app-level token and only it; every other method the bot token.
        socket = name == SOCKET_OPEN
        if token != (self.app_token if socket else self.token):
            wrong_type = token in (self.token, self.app_token)
            return self._answer(
                call, {"ok": False, "error": "not_allowed_token_type" if wrong_type else "invalid_auth"}
            )
        method = METHODS.get(name)
        if method is None and not socket:
            return self._answer(call, {"ok": False, "error": "unknown_method"})
        fault = self.faults.next(name)
        await pause(fault)
        if fault is not None and fault.kind == "fail" and not fault.applied:
            return self._fail(call, fault)
        if method is None:
            return self._answer(call, {"ok": True, **self.socket.open_url()})
        limit = self.rate_limits.get(name)
        if limit is not None:
            wait = limit.admit(str(params.get("channel") or params.get("channel_id") or ""))
            if wait is not None:
                headers = {"Retry-After": str(wait)}
                return self._answer(call, {"ok": False, "error": "ratelimited"}, 429, headers)
        if fault is not None and fault.kind == "late":
            self._apply_later(call, method, params, fault.seconds)
            drop_connection(request)
        body = self._apply(method, params)
        if fault is not None and fault.kind == "drop":
            drop_connection(request)
        if fault is not None and fault.kind == "fail":
            return self._fail(call, fault)
        await self.faults.wait_if_held(name)
        return self._answer(call, body)

    def _apply(self, method: Method, params: Params) -> JSON:
        """Do a call's work: its answer's body, ``ok`` or Slack's error."""
        try:
            needed = method.required_scope(self, params)
            if needed is not None and needed not in self.scopes:
                raise SlackError("missing_scope", needed=needed, provided=",".join(self.scopes))
            return {"ok": True, **method.handler(self, params)}
        except SlackError as exc:
            return {"ok": False, "error": exc.code, **exc.extra}

    def _apply_later(self, call: Call, method: Method, params: Params, seconds: float) -> None:
        async def later() -> None:
            await asyncio.sleep(seconds)
            call.response = self._apply(method, params)
            self.applied_late.append(call)
            for callback in self._after:
                callback(call)

        task = asyncio.get_running_loop().create_task(later())
        self._late.add(task)
        task.add_done_callback(self._late.discard)
