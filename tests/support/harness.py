"""An in-process threadbound served over real HTTP next to a fake Slack, for tests and benchmarks.

async with FakeSlack() as slack, AppHarness(slack, model=echo_model(), data_dir=tmp) as app:
    slack.add_channel("C1", "general")
    ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
    await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
    await app.idle()

``AppHarness(..., socket_mode=True)`` takes deliveries over the emulator's Socket Mode instead
(``events.over_socket(slack, envelope)``); ``start`` returns once the socket is open.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from pydantic_ai.models import Model

from app.intake.edge_thread import EdgeThread
from app.runs.run import RunHooks
from app.service import Service
from app.settings import Settings
from threadbound_emulator import FakeSlack

from . import events

SIGNING_SECRET = "test-signing-secret"
#: Seconds between the app's pings in Socket Mode tests (production: ``PING_INTERVAL``).
SOCKET_PING_INTERVAL = 0.25


#: Ports ``free_port`` hands out: this many just below the kernel's ephemeral range, where it never
#: puts a port-0 bind (every in-process server, the fakes) or an outgoing connection's local port.
_RESERVED_PORTS = 12_000
#: Each pytest-xdist worker takes its ports from a slice of its own (workers beyond this share).
_PORT_SLICES = 16
_next_port: int | None = None


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or None where it is not known."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nobody listens on, for a server that binds it later (a child process, once
    it has started). A port-0 bind would hand out a port from the ephemeral range, which any
    connection or server of another test (another xdist worker) may take in the seconds before
    the child binds it; so ports come from below that range, each xdist worker from its own slice,
    in turn (no two servers of one worker get the same port while both may be starting). Where the
    range is unknown (not Linux) or leaves no room below it, the OS chooses."""
    global _next_port
    low = _ephemeral_low()
    if low is None or low - 1024 < _RESERVED_PORTS:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    size = _RESERVED_PORTS // _PORT_SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = low - _RESERVED_PORTS + (int(worker) if worker.isdigit() else 0) % _PORT_SLICES * size
    if _next_port is None:  # another pytest session on this machine starts elsewhere in the slice
        _next_port = random.randrange(size)
    for _ in range(size):
        port = first + _next_port % size
        _next_port += 1
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {first}-{first + size - 1}")


def settings_for(slack: FakeSlack, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "slack_bot_token": slack.token,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": slack.api_url,
        "slack_file_origins": (slack.files_origin,),
        "data_dir": data_dir,
        "model": "openai-chat:unused",
        "openai_api_key": "sk-unused-in-tests",  # an OpenAI model without a key is refused at start-up
        "sweep_interval": 3600.0,
        "shutdown_grace": 5.0,
        "agent_file": None,
        "skills_dir": None,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


class AppHarness:
    def __init__(
        self,
        slack: FakeSlack,
        *,
        model: Model | None,
        data_dir: Path,
        hooks: RunHooks | None = None,
        owner: str | None = None,
        model_name: str | None = None,
        socket_mode: bool = False,
        edge_thread: bool = False,
        bind_port: int = 0,
        **overrides: Any,
    ) -> None:
        """``model`` drives the agent in-process; with ``model=None`` the service builds the model
        from ``model_name`` (a MODEL value such as ``openai-chat:NAME``) as production does.
        ``socket_mode`` sets SLACK_APP_TOKEN to the emulator's app token (no signing secret).
        ``edge_thread`` serves HTTP from a thread of its own as ``serve`` does
        (``app.intake.edge_thread``); otherwise on the test's loop. ``bind_port``: serve on this port
        (0: one the OS picks), for a URL the app must know before it starts (``PUBLIC_URL``)."""
        self.bind_port = bind_port
        self.edge_thread = edge_thread
        self._edge: EdgeThread | None = None
        self.slack = slack
        self.model = model
        if model_name is not None:
            overrides["model"] = model_name
        if socket_mode:
            overrides.setdefault("slack_app_token", slack.app_token)
            overrides.setdefault("slack_signing_secret", "")
        self.settings = settings_for(slack, data_dir, **overrides)
        self.hooks = hooks
        self.owner = owner
        self.service: Service | None = None
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> AppHarness:
        self.service = await Service.create(
            self.settings, model=self.model, hooks=self.hooks, owner=self.owner
        )
        socket = self.service.socket
        if socket is not None:
            socket.ping_interval = SOCKET_PING_INTERVAL  # a dropped socket is replaced within a second
            opened = self.slack.socket.opened + 1
        if self.edge_thread:
            service = self.service
            self._edge = EdgeThread(
                service.http, service.ingress, service.store, service.agent_view, service.main
            )
            await self._edge.start("127.0.0.1", 0, 2.0)
            self.port = self._edge.port
        else:
            self._runner = web.AppRunner(self.service.web_app, handle_signals=False, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", self.bind_port)
            await site.start()
            # aiohttp exposes the OS-chosen port only through the runner's bound addresses.
            self.port = int(self._runner.addresses[0][1])
        self._http = aiohttp.ClientSession()
        if socket is not None:
            async with asyncio.timeout(10):
                await self.slack.socket.wait_connections(1, opened=opened)
        return self

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._runner is not None:
            await self._runner.cleanup()  # on_shutdown drains the runner
            self._runner = None
        if self._edge is not None:
            await self._edge.stop()  # the same, the drain on this loop
            self._edge = None
        if self.service is not None:
            await self.service.close()
            self.service = None

    async def __aenter__(self) -> AppHarness:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def deliver(self, envelope: dict[str, Any], retry_num: int | None = None) -> aiohttp.ClientResponse:
        assert self._http is not None
        return await events.deliver(
            self._http, f"{self.url}/slack/events", envelope, SIGNING_SECRET, retry_num=retry_num
        )

    async def click(self, payload: dict[str, Any]) -> aiohttp.ClientResponse:
        """Deliver an interaction payload (``events.block_actions``), signed and form-encoded."""
        assert self._http is not None
        return await events.deliver_interaction(
            self._http, f"{self.url}/slack/events", payload, SIGNING_SECRET
        )

    async def post_raw(self, body: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        assert self._http is not None
        response = await self._http.post(f"{self.url}/slack/events", data=body, headers=headers)
        await response.read()
        return response

    async def get(self, path: str) -> aiohttp.ClientResponse:
        assert self._http is not None
        response = await self._http.get(f"{self.url}{path}")
        await response.read()
        return response

    async def idle(self) -> None:
        assert self.service is not None
        await self.service.runner.idle()
