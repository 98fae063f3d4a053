"""The HTTP edge: the aiohttp app serving ``/slack/events`` (through Bolt), ``/healthz``, ``/readyz``
and ``/metrics``.

Nothing unsigned is parsed: ``/slack/events`` checks the signature on the raw bytes first
(``signature.unsigned_reason``; 401 and at most one warning line), and a signed body that does
not parse (bad JSON, a form ``payload`` that is not JSON, nesting too deep) is a 400, never a 500.
Bolt's ``AsyncApp`` stays at the edge: it verifies signatures again (401), answers
``url_verification`` and ``ssl_check``, then our middleware turns every
``event_callback`` into a durable inbox item and answers 200 itself — Bolt's
listener machinery (which acks before work and would 404 unmatched events) is
not used. A signed JSON ``event_callback`` (every Events API delivery) skips Bolt altogether
(:data:`EventAcker`): its signature is checked once, its body parsed once, its claim awaited,
its 200 written, and only then is it logged and counted. What the edge needs of the rest (the
store's ping, the metrics, start-up and shutdown) it is handed by the composition root, ``app.service``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from app.settings import Settings
from storage import StoreError

from .agent_view import AGENT_EVENTS, AgentView
from .heartbeat import Heartbeat
from .ingress import Ingress
from .interactions import Interactions
from .signature import same_secret, unsigned_reason

log = logging.getLogger(__name__)
T = TypeVar("T")
#: At most one warning line per this many seconds about refused requests (the rest are counted).
REFUSAL_LOG_INTERVAL = 60.0

#: The answer of POST /slack/events when deliveries come over Socket Mode only.
HTTP_EVENTS_OFF = (
    "this app takes Slack deliveries over Socket Mode (SLACK_APP_TOKEN is set); "
    "set SLACK_HTTP_EVENTS=true to take them over HTTP as well"
)


#: A slash command's payload → ``(status, the private answer)`` (``app.intake.slash_command``).
Command = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


class _Ingest(AsyncMiddleware):
    """Every event_callback becomes an inbox item, every click and message shortcut goes to
    ``app.intake.interactions``, a slash command to ``app.intake.slash_command``; nothing reaches
    Bolt's listeners."""

    def __init__(
        self,
        handle: Callable[[dict[str, Any]], Awaitable[tuple[int, str]]],
        interactions: Interactions | None = None,
        command: Command | None = None,
    ) -> None:
        self._handle = handle
        self._interactions = interactions
        self._command = command

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        body = req.body
        if not isinstance(body, dict) or not body:
            return BoltResponse(status=400, body="malformed request body")
        if body.get("type") == "event_callback":
            status, text = await self._handle(body)
            return BoltResponse(status=status, body=text)
        if body.get("type") in ("url_verification", "ssl_check") or "ssl_check" in body:
            return await next()
        if body.get("type") in ("block_actions", "message_action") and self._interactions is not None:
            status, text = await self._interactions.handle(body)
            return BoltResponse(status=status, body=text)
        if "command" in body and self._command is not None:  # a slash command: answered in the body
            status, answer = await self._command(body)
            return BoltResponse(status=status, body=json.dumps(answer))  # JSON: Bolt says so
        # Other interactivity (view submissions, global shortcuts), unknown envelope types: acknowledge.
        return BoltResponse(status=200, body="")


def event_handler(
    ingress: Ingress, agent_view: AgentView | None
) -> Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]:
    """What an ``event_callback`` body becomes, over HTTP and over Socket Mode alike: ``(status, reason)``."""

    async def handle(body: dict[str, Any]) -> tuple[int, str]:
        if agent_view is not None and (event := _agent_event(body)) is not None:
            await agent_view.event(event)  # then logged (and ignored) by the ingress like any event
        result = await ingress.handle(body)
        return result.status, "" if result.status == 200 else result.reason

    return handle


class AckCounter(Protocol):
    """Counts a delivery from arrival to answer (:class:`~app.runs.ack_gate.AckGate`, or the edge
    process's report of it, ``app.intake.edge_wire.ToService``)."""

    def acking(self) -> contextlib.AbstractContextManager[None]: ...

    @property
    def in_flight(self) -> int: ...


class OnMain(Protocol):
    """Runs a call on the service's main loop (``app.intake.edge_thread.MainLoop``)."""

    def call(self, make: Callable[[], Awaitable[T]]) -> Awaitable[T]: ...

    def here(self) -> bool: ...

    def soon(self, fn: Callable[..., Any], *args: Any) -> None: ...


#: Answers a request on the service's process instead: ``(request, its raw body) → the answer``.
Forward = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]

#: An ``event_callback`` body → ``(status, reason, finish)``: the claim is durable when it returns;
#: ``finish()`` (logging, metrics) runs after the answer was written.
EventAcker = Callable[[dict[str, Any]], Awaitable[tuple[int, str, Callable[[], None]]]]


def event_acker(ingress: Ingress, agent_view: AgentView | None, main: OnMain | None = None) -> EventAcker:
    """What an ``event_callback`` body becomes over HTTP, its bookkeeping left for after the 200.
    ``main`` runs the agent view's calls on the loop its adapter belongs to (``app.intake.edge_thread``)."""

    async def accept(body: dict[str, Any]) -> tuple[int, str, Callable[[], None]]:
        if agent_view is not None and (event := _agent_event(body)) is not None:
            if main is None:
                await agent_view.event(event)
            else:
                await main.call(lambda: agent_view.event(event))
        result, finish = await ingress.accept(body)
        if main is not None and not main.here():
            # The log line (a write that lets go of the GIL) and the metrics go to the main loop
            # with the delivery's wake-up: the edge's thread goes on to the next ack.
            def on_main() -> None:
                main.soon(finish)

            return result.status, "" if result.status == 200 else result.reason, on_main
        return result.status, "" if result.status == 200 else result.reason, finish

    return accept


def _agent_event(body: dict[str, Any]) -> dict[str, Any] | None:
    """The delivery's event when it is one for the agent view (``AGENT_EVENTS``), else None."""
    event = body.get("event")
    return event if isinstance(event, dict) and event.get("type") in AGENT_EVENTS else None


def _event_callback(raw: bytes, content_type: str) -> dict[str, Any] | None:
    """The body of an Events API delivery (JSON, ``type: event_callback``); None for anything else,
    which goes through Bolt (url_verification, interactivity forms, malformed bodies)."""
    if content_type != "application/json" or b'"event_callback"' not in raw:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) and body.get("type") == "event_callback" else None


def build_bolt(
    settings: Settings,
    ingress: Ingress,
    interactions: Interactions | None = None,
    agent_view: AgentView | None = None,
    command: Command | None = None,
) -> AsyncApp:
    handle = event_handler(ingress, agent_view)
    # The token is passed as is, not through an `authorize` function: Bolt then warns that "`token`
    # (or SLACK_BOT_TOKEN env variable) will be ignored", which reads as if the user's token were.
    # Bolt's authorization never runs anyway: _Ingest answers every event and interaction before
    # it, and url_verification and ssl_check need none. The name is given: without it Bolt takes its
    # caller's file name from inspect.stack(), which reads the source of every frame and maps every
    # loaded module to its file (0.1-0.2 s of each start, the restart that recovers a run included).
    return AsyncApp(
        name="threadbound",
        token=settings.slack_bot_token.get_secret_value(),
        signing_secret=settings.slack_signing_secret.get_secret_value(),
        before_authorize=_Ingest(handle, interactions, command),
        process_before_response=True,
        ignoring_self_events_enabled=False,
        raise_error_for_unhandled_request=False,
    )


class HttpEdge:
    """The aiohttp app (:attr:`app`) answering Slack and the probes; it builds nothing itself."""

    def __init__(
        self,
        *,
        bolt: AsyncApp | None,
        signing_secret: str,
        max_body_bytes: int,
        metrics_token: str,
        ping: Callable[[], Awaitable[None]],
        metrics: Callable[[], bytes],
        ack_gate: AckCounter | None,
        on_startup: Callable[[], Awaitable[None]],
        on_shutdown: Callable[[], Awaitable[None]],
        slack_events: bool = True,
        socket_connected: Callable[[], bool] | None = None,
        events: EventAcker | None = None,
        main: OnMain | None = None,
        forward: Forward | None = None,
        oauth_callback: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None,
    ) -> None:
        """``ping`` raises StoreError when the store is unreachable; ``metrics`` renders the registry.
        ``slack_events=False`` (Socket Mode only) refuses POST /slack/events with 404 and
        :data:`HTTP_EVENTS_OFF`; ``socket_connected`` adds ``socket_mode`` to /readyz. ``events`` takes
        signed JSON ``event_callback`` bodies past Bolt (:func:`event_acker`). ``main``: when the app is
        served from another thread (``app.intake.edge_thread``), Bolt, ``ping`` and the start-up and
        shutdown hooks run on the main loop through it. ``forward``: when the app is served from a
        process of its own (``app.intake.edge_child``), every request but a signed ``event_callback``
        (and ``/healthz``) is handed to the service's process through it, which answers it.
        ``oauth_callback`` answers ``GET /oauth/callback`` (per-person MCP servers)."""
        #: Replaced while served from the edge's thread by one claiming on that thread's loop.
        self.events = events
        self._main = main
        self._slack_events = slack_events
        self._socket_connected = socket_connected
        self.bolt = bolt
        self._signing_secret = signing_secret
        self._refused = 0
        self._refusal_logged_at = -REFUSAL_LOG_INTERVAL
        self._metrics_token = metrics_token
        self._ping = ping
        self._render_metrics = metrics
        self._ack_gate = ack_gate
        self._startup = on_startup
        self._shutdown = on_shutdown
        self._forward = forward
        #: Served from another thread or process than the service loop: that loop's heartbeat, and
        #: the seconds without a beat past which ``/healthz`` answers 503 (:meth:`watch`).
        self._heartbeat: Heartbeat | None = None
        self._health_deadline = 0.0
        app = web.Application(client_max_size=max_body_bytes)
        app.router.add_post("/slack/events", self._events)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz if forward is None else self._forwarded)
        app.router.add_get("/metrics", self._metrics if forward is None else self._forwarded)
        # Per-person MCP servers send people back here (app.agent.mcp.oauth); the service answers.
        if forward is not None:
            app.router.add_get("/oauth/callback", self._forwarded)
        elif oauth_callback is not None:
            app.router.add_get("/oauth/callback", oauth_callback)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        self.app = app

    def watch(self, heartbeat: Heartbeat, deadline: float) -> None:
        """``/healthz`` answers 503 once the service loop's last beat is older than ``deadline``
        seconds (``HEALTH_DEADLINE_S``; 0: never): the edge serves from a thread or process of its
        own, so its own answer says nothing of the loop that runs the conversations."""
        self._heartbeat, self._health_deadline = heartbeat, deadline

    def nothing_else_to_do(self) -> bool:
        """At most one delivery in flight (the caller's): the edge's store may work inline
        (``Store.inline_when``)."""
        return self._ack_gate is None or self._ack_gate.in_flight <= 1

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if not self._slack_events:
            return web.Response(status=404, text=HTTP_EVENTS_OFF)
        # Counted until answered: run start-ups wait for a moment without acks in flight.
        gate = self._ack_gate
        with gate.acking() if gate is not None else contextlib.nullcontext():
            response, finish = await self._answer(request)
        if finish is not None:
            finish()  # the answer is written: log and count the delivery
        return response

    async def _answer(self, request: web.Request) -> tuple[web.StreamResponse, Callable[[], None] | None]:
        """The answer to a POST on /slack/events, and for a claimed event what to do once it went out."""
        raw = await request.read()
        reason = unsigned_reason(self._signing_secret, request.headers, raw)
        if reason is not None:
            self._refuse(reason)
            return web.Response(status=401, text="invalid request"), None
        acker = self.events
        body = _event_callback(raw, request.content_type) if acker is not None else None
        if self._forward is not None and (body is None or _agent_event(body) is not None):
            return await self._forward(request, raw), None
        if body is not None and acker is not None:
            try:
                status, text, finish = await acker(body)
            except RecursionError:  # parsed, but nested too deep for what walks it next
                log.warning("a signed request on /slack/events is nested too deeply to handle")
                return web.Response(status=400, text="malformed request body"), None
            response = web.Response(status=status, text=text)
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionResetError:
                # Slack hung up before reading the answer: the claim is saved (Slack's retry dedupes),
                # so the delivery still counts; only the answer went nowhere.
                log.info("the client hung up before its answer was written")
            return response, finish
        try:
            # Bolt parses the body eagerly: bad JSON, bad form data, bad UTF-8, a body that is not
            # an object (Bolt then fails reading its fields) or one nested deeper than the parser
            # recurses lands here.
            bolt_request = AsyncBoltRequest(
                body=raw.decode("utf-8"), query=request.query_string, headers=dict(request.headers)
            )
        except (ValueError, RecursionError, AttributeError, TypeError):
            return web.Response(status=400, text="malformed request body"), None
        bolt = self.bolt
        assert bolt is not None  # only a forwarding edge has none, and it forwarded above
        try:
            answer = await self._on_main(lambda: bolt.async_dispatch(bolt_request))
            return await to_aiohttp_response(answer), None
        except RecursionError:  # parsed, but nested too deep for what walks it next
            log.warning("a signed request on /slack/events is nested too deeply to handle")
            return web.Response(status=400, text="malformed request body"), None

    async def _forwarded(self, request: web.Request) -> web.StreamResponse:
        assert self._forward is not None
        return await self._forward(request, await request.read())

    def _refuse(self, reason: str) -> None:
        """One warning line per ``REFUSAL_LOG_INTERVAL`` at most, counting the refusals in between."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL:
            log.warning(
                "refused %d unsigned request(s) on /slack/events (latest: %s); check SLACK_SIGNING_SECRET "
                "if Slack's own deliveries are refused",
                self._refused,
                reason,
            )
            self._refused = 0
            self._refusal_logged_at = now

    async def _healthz(self, _: web.Request) -> web.Response:
        beat, deadline = self._heartbeat, self._health_deadline
        if beat is not None and deadline > 0 and (age := beat.age()) > deadline:
            log.warning("healthz: no heartbeat of the service loop for %.1fs (HEALTH_DEADLINE_S)", age)
            return web.json_response({"ok": False, "service_loop_silent_s": round(age, 1)}, status=503)
        return web.json_response({"ok": True})

    def _on_main(self, make: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        return make() if self._main is None else self._main.call(make)

    async def _readyz(self, _: web.Request) -> web.Response:
        try:
            await self._on_main(self._ping)
        except StoreError as exc:
            # Callers learn only that it is not ready; what failed (a database host, say) goes to the log.
            log.warning("readyz: the store is unreachable: %s", exc)
            return web.json_response({"ok": False}, status=503)
        if self._socket_connected is not None:
            return web.json_response({"ok": True, "socket_mode": self._socket_connected()})
        return web.json_response({"ok": True})

    async def _metrics(self, request: web.Request) -> web.Response:
        token = self._metrics_token
        if token and not same_secret(request.headers.get("Authorization", ""), f"Bearer {token}"):
            return web.Response(status=401, text="metrics need Authorization: Bearer $METRICS_TOKEN")
        return web.Response(body=self._render_metrics(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _on_startup(self, _: web.Application) -> None:
        await self._on_main(self._startup)

    async def _on_shutdown(self, _: web.Application) -> None:
        await self._on_main(self._shutdown)


def listen_error(host: str, port: int, exc: OSError) -> str:
    """Why listening on ``host:port`` failed, in one line naming the setting to change."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is already in use ({where}): stop the other server or set another PORT"
    if exc.errno == errno.EACCES:
        return f"no permission to listen on {where}: use a PORT above 1023"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: HOST is not an address of this machine (try 0.0.0.0 or 127.0.0.1)"
    return f"cannot listen on {where}: {exc.strerror or exc}; check HOST and PORT"
