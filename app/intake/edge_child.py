"""The HTTP edge's own process: the ack path with a core, an interpreter and a heap of its own.

``serve`` forks it before the service starts (``app.intake.edge_process``), with the listening
sockets already bound. Here a delivery's whole ack path runs: the signature check, the parse, the
router, the durable claim and inbox append (through a store of its own on the same database) and
the 200; the task's wake-up then crosses the wire to the service (``app.intake.edge_wire``), and a
new conversation's thinking status is set from here (``app.intake.edge_status``). What
needs the service — Bolt (``url_verification``, clicks, other payloads), the agent view's events,
``/readyz`` and ``/metrics`` — is handed to the service's web app on a Unix socket and answered
with its answer. Runs working in the service never share a GIL with an acknowledgement.

It dies with the service: the kernel kills it when its parent dies (``PR_SET_PDEATHSIG``), and it
exits at once when the wire closes. SIGTERM or SIGINT stop it gracefully: it stops accepting,
answers the requests in flight and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.settings import Settings
from channel.slack.identity import SlackIdentity
from storage import open_store

from .edge_status import EdgeStatus
from .edge_wire import Forwarder, ToService
from .heartbeat import Heartbeat
from .http import EventAcker, HttpEdge, event_acker
from .ingress import Ingress

log = logging.getLogger(__name__)
#: The listen backlog (aiohttp's default).
BACKLOG = 128
_PR_SET_PDEATHSIG = 1


def run(
    settings: Settings, sockets: list[socket.socket], wire: socket.socket, parent: int, heartbeat: Heartbeat
) -> int:
    """The forked child's whole life; its exit code (the caller ends the process with it).
    ``heartbeat``: the service loop's, which ``/healthz`` reads."""
    _die_with(parent)
    try:
        return asyncio.run(_serve(settings, sockets, wire, heartbeat))
    except Exception:
        log.exception("the HTTP edge process failed")
        return 1


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies (Linux); elsewhere the closed wire
    ends it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # died between the fork and the line above
        os._exit(1)


async def _serve(
    settings: Settings, sockets: list[socket.socket], wire: socket.socket, heartbeat: Heartbeat
) -> int:
    reader, writer = await asyncio.open_connection(sock=wire)
    hello = await reader.readline()
    if not hello:
        return 0  # the service did not start: nothing to serve
    said: dict[str, Any] = json.loads(hello)
    to_service = ToService(writer)
    main_store = open_store(settings.resolved_database_url)
    store = main_store.for_another_loop()  # never registers as an instance; a small pool on Postgres
    forward = Forwarder(said["forward"])
    runner: web.AppRunner | None = None
    bot = SlackIdentity(**{**said["bot"], "scopes": tuple(said["bot"]["scopes"])})
    status = EdgeStatus.of(settings, bot, said.get("status"), to_service)
    try:
        ingress = Ingress(
            store=store,
            scheduler=to_service,
            bot=bot,
            settings=settings,
            on_result=to_service.delivered,
            on_external=to_service.external,
            on_created=status.created if status is not None else None,
        )
        edge = HttpEdge(
            bolt=None,
            signing_secret=settings.slack_signing_secret.get_secret_value(),
            max_body_bytes=settings.max_body_bytes,
            metrics_token="",
            ping=_nothing,
            metrics=bytes,
            ack_gate=to_service,
            on_startup=_nothing,
            on_shutdown=_nothing,
            events=_after_the_wire(event_acker(ingress, None)),
            forward=forward,
        )
        edge.watch(heartbeat, settings.health_deadline_s)
        store.inline_when(edge.nothing_else_to_do)
        runner = web.AppRunner(
            edge.app, handle_signals=False, access_log=None, shutdown_timeout=float(said["shutdown_timeout"])
        )
        await runner.setup()
        sites = []
        for sock in sockets:
            sock.listen(BACKLOG)
            sites.append(web.SockSite(runner, sock))
            await sites[-1].start()
        gc.freeze()  # what start-up built is not walked by every full collection (app.ops.heap)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        to_service.send(t="ready")
        gone = asyncio.create_task(reader.read())  # the service writes nothing more: EOF is its end
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait((gone, stopping), return_when=asyncio.FIRST_COMPLETED)
        if gone.done():
            os._exit(0)  # the service is gone: nobody would run what is claimed now; Slack retries
        for site in sites:
            await site.stop()  # stop accepting; those in flight are answered below
        return 0
    except Exception as exc:
        log.exception("the HTTP edge process could not start")
        to_service.send(t="failed", why=str(exc) or type(exc).__name__)
        return 1
    finally:
        if runner is not None:
            await runner.cleanup()
        await to_service.drain()  # the last wake-ups first
        if status is not None:
            await status.close()  # then the outcomes of statuses still being set
            await to_service.drain()
        await forward.close()
        await store.close()
        await main_store.close()


def _after_the_wire(acker: EventAcker) -> EventAcker:
    """A delivery's log line and metrics queued behind the wire's next write (one loop lap later):
    the wake-up of the task it claimed leaves first, not after the line is formatted and written."""

    async def accept(body: dict[str, Any]) -> tuple[int, str, Callable[[], None]]:
        status, text, finish = await acker(body)
        loop = asyncio.get_running_loop()

        def later() -> None:
            loop.call_soon(finish)

        return status, text, later

    return accept


async def _nothing() -> None:
    return None
