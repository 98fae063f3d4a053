"""Socket Mode: Slack's deliveries over a WebSocket the app opens, into the same ingress as HTTP.

With ``SLACK_APP_TOKEN`` (an app-level token, ``xapp-…``, scope ``connections:write``)
the app calls ``apps.connections.open`` and keeps a WebSocket open with slack-sdk's
aiohttp ``SocketModeClient``. Each envelope's ``payload`` is exactly the body Slack
would POST over HTTP: an ``events_api`` payload goes to the same handler as a POSTed
``event_callback`` (agent view, then the ingress: classified, claimed durably, inbox),
an ``interactive`` one to the same click handlers (and message shortcuts), a ``slash_commands``
one to the slash command, whose private answer goes back as the ack's ``payload``.

The envelope is acknowledged only after that handler answered below 500, i.e. after
the claim committed. A process that dies before its ack leaves the envelope
unacknowledged: Slack sends it again (``retry_attempt`` > 0), to this process after a
restart or to another instance, and the claim makes it a duplicate. A handler that
answers 5xx (the store is unavailable) is not acknowledged, so Slack retries it.

slack-sdk reconnects on Slack's ``disconnect`` messages (a fresh URL, then the old
socket closes) and on a dropped socket (its ping/pong monitor notices within about
two ``ping_interval``); an ack lost with a socket only means a redelivery, deduped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from app import logs
from app.runs.ack_gate import AckGate
from app.settings import Settings, app_token_problem

log = logging.getLogger(__name__)

#: A delivery handler: the payload Slack would POST over HTTP → ``(status, reason)``.
Handler = Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]
#: A slash command's payload → ``(status, its private answer)`` (``app.intake.slash_command``).
Command = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]

#: Seconds between pings on the socket; a socket silent for about two of them is replaced.
PING_INTERVAL = 5.0
#: Seconds ``stop`` waits for deliveries being claimed to finish (and be acknowledged).
STOP_GRACE = 5.0
_TIMEOUT = 10  # seconds for apps.connections.open


class SocketModeError(Exception):
    """``apps.connections.open`` refused the app token; the message says what to fix."""


def check_transport(settings: Settings) -> None:
    """``SocketModeError`` (one line, before any network call) when the delivery settings cannot
    work: a SLACK_APP_TOKEN of the wrong shape, or SLACK_HTTP_EVENTS=false without one."""
    if settings.socket_mode:
        problem = app_token_problem(settings.slack_app_token.get_secret_value())
        if problem:
            raise SocketModeError(problem)
    elif not settings.http_events:
        raise SocketModeError(
            "SLACK_HTTP_EVENTS=false without SLACK_APP_TOKEN leaves Slack no way to deliver events"
        )


async def first_socket_url(settings: Settings, *, serving: bool) -> str | None:
    """Start-up's Socket Mode checks: :func:`check_transport`, then, when ``serving`` in Socket Mode,
    the first connection URL (``apps.connections.open`` checks the app token); else None."""
    check_transport(settings)
    if not (serving and settings.socket_mode):
        return None
    return await open_connection_url(settings.slack_app_token.get_secret_value(), settings.slack_api_url)


async def open_connection_url(app_token: str, api_url: str) -> str:
    """A fresh WebSocket URL from ``apps.connections.open``, or ``SocketModeError`` in one line."""
    client = AsyncWebClient(base_url=api_url, timeout=_TIMEOUT)
    try:
        response = await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        raise SocketModeError(_refusal(str(exc.response.get("error") or ""))) from exc
    except (OSError, TimeoutError) as exc:
        raise SocketModeError(
            f"cannot reach Slack at {api_url} to open a Socket Mode connection: check SLACK_API_URL "
            "and the network"
        ) from exc
    url = response.get("url")
    if not isinstance(url, str) or not url:
        raise SocketModeError("apps.connections.open answered without a URL")
    return url


def _refusal(code: str) -> str:
    if code in ("invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"):
        return (
            "SLACK_APP_TOKEN is invalid or revoked: generate an app-level token with connections:write "
            "under Basic Information → App-Level Tokens"
        )
    if code == "not_allowed_token_type":
        return "SLACK_APP_TOKEN is not an app-level token: use the xapp-… token from Basic Information"
    if code == "missing_scope":
        return "SLACK_APP_TOKEN lacks the connections:write scope: generate one that has it"
    if code == "ratelimited":
        return "apps.connections.open is rate limited: wait a minute and start again"
    why = code or "no error code"
    return f"apps.connections.open failed ({why}): check SLACK_APP_TOKEN and SLACK_API_URL"


class _Client(SocketModeClient):
    """slack-sdk's client, whose first connection uses the URL start-up already fetched (one
    ``apps.connections.open`` call, a Tier 1 method, per start)."""

    first_url: str | None = None

    async def issue_new_wss_url(self) -> str:
        url, self.first_url = self.first_url, None
        return url or await super().issue_new_wss_url()


class SocketModeIntake:
    """One Socket Mode connection feeding ``on_event`` and ``on_interaction``; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        on_event: Handler,
        on_interaction: Handler,
        *,
        ack_gate: AckGate | None = None,
        ping_interval: float = PING_INTERVAL,
        on_command: Command | None = None,
    ) -> None:
        self.app_token = settings.slack_app_token.get_secret_value()
        self.api_url = settings.slack_api_url
        self.on_event = on_event
        self.on_interaction = on_interaction
        #: Slash commands (``slash_commands`` envelopes), answered in the ack's payload.
        self.on_command = on_command
        self.ack_gate = ack_gate
        self.ping_interval = ping_interval
        self._client: _Client | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[Any]] = set()

    @property
    def connected(self) -> bool:
        """A socket is open (between a drop and its replacement, it is not)."""
        session = self._client.current_session if self._client is not None else None
        return session is not None and not session.closed

    def start(self, first_url: str | None = None) -> None:
        """Connect in the background (slack-sdk retries until it succeeds); ``first_url`` is a URL
        start-up already got from ``apps.connections.open``."""
        client = _Client(
            app_token=self.app_token,
            web_client=AsyncWebClient(base_url=self.api_url, timeout=_TIMEOUT),
            ping_interval=self.ping_interval,
            logger=logging.getLogger(f"{__name__}.client"),
        )
        client.first_url = first_url
        client.socket_mode_request_listeners.append(self._on_request)  # type: ignore[arg-type]
        self._client = client
        self._connecting = asyncio.create_task(client.connect(), name="socket-mode-connect")

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop receiving, then let deliveries being claimed finish and be acknowledged (within
        ``grace`` seconds); unacknowledged envelopes are Slack's to redeliver."""
        client, self._client = self._client, None
        if client is None:
            return
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        # No new envelopes from here on: the receiver stops, the socket stays open for the acks.
        client.auto_reconnect_enabled = False
        if client.message_receiver is not None:
            client.message_receiver.cancel()
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=grace)
        await client.close()

    async def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            await self._deliver(client, request)
        finally:
            if task is not None:
                self._in_flight.discard(task)

    async def _deliver(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        # Counted until acknowledged, like an HTTP delivery until its 200; the delivery's log line
        # carries the envelope (and the attempt, when it is Slack's retry).
        gate = self.ack_gate if self.ack_gate is not None else AckGate()
        with logs.bind(envelope_id=request.envelope_id, retry_attempt=request.retry_attempt or None):
            with gate.acking():
                status, reason, answer = await self._handle(request)
                if status >= 500:
                    log.warning("not acknowledged (%s %s): Slack will send it again", status, reason)
                    return
                ack = SocketModeResponse(envelope_id=request.envelope_id, payload=answer)
                try:
                    await client.send_socket_mode_response(ack)
                except Exception as exc:  # the socket went away: Slack redelivers, the claim dedupes
                    log.warning("an ack was lost (%s); Slack will send the envelope again", exc)

    async def _handle(self, request: SocketModeRequest) -> tuple[int, str, dict[str, Any] | None]:
        """``(status, reason, the ack's payload)``: only a slash command's ack carries one (its answer)."""
        try:
            if request.type == "slash_commands" and self.on_command is not None:
                status, answer = await self.on_command(request.payload)
                return status, "", answer
            handler = {"events_api": self.on_event, "interactive": self.on_interaction}.get(request.type)
            if handler is None:
                log.info("Socket Mode envelope of type %s acknowledged and ignored", request.type)
                return 200, "", None
            status, reason = await handler(request.payload)
            return status, reason, None
        except Exception:
            log.exception("a Socket Mode delivery failed; Slack will send it again")
            return 500, "handler failed", None


__all__ = [
    "PING_INTERVAL",
    "Handler",
    "SocketModeError",
    "SocketModeIntake",
    "check_transport",
    "first_socket_url",
    "open_connection_url",
]
