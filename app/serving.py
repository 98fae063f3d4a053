"""``serve``: the service's life as a process — the HTTP edge started, signals heard, the drain
within ``SHUTDOWN_GRACE`` and a watchdog that ends the process whatever stalls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

from pydantic_ai.models import Model

from app.intake.edge_process import EdgeFailed, EdgeProcess
from app.intake.edges import start_edge
from app.ops.heap import freeze_startup_heap
from app.ops.shutdown import HTTP_WAIT, SHUTDOWN_MARGIN, Deadline, Watchdog, bounded
from app.service import Service, StartupError
from app.settings import Settings

log = logging.getLogger(__name__)


async def serve(
    settings: Settings,
    *,
    model: Model | None = None,
    ready: asyncio.Event | None = None,
    forked: EdgeProcess | None = None,
) -> None:
    """Run the HTTP server until SIGTERM/SIGINT, then drain within ``SHUTDOWN_GRACE`` and exit.
    ``forked``: the HTTP edge's own process, already bound to HOST:PORT (``python -m app serve``);
    without it the edge serves from a thread of this process."""
    try:
        service = await Service.create(settings, model=model)
    except BaseException:
        if forked is not None:
            forked.kill()
        raise
    freeze_startup_heap()  # full collections then skip what start-up built (app.ops.heap)
    stop = asyncio.Event()
    try:
        edge = await start_edge(service, forked, stop.set, HTTP_WAIT)
    except EdgeFailed as exc:
        await service.close()
        raise StartupError(str(exc)) from exc
    log.info("listening on %s port %s", settings.host, settings.port)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    started = time.monotonic()
    log.info("shutting down: draining running turns for up to %.0fs", settings.shutdown_grace)
    # Whatever stalls, the process is gone SHUTDOWN_GRACE + SHUTDOWN_MARGIN seconds from now. Never
    # cancelled: asyncio.run's teardown after this function (cancelling what is left, such as a
    # store pool's tasks on connections that answer nothing) can hang as well.
    Watchdog(settings.shutdown_grace + SHUTDOWN_MARGIN).start()
    deadline = Deadline(settings.shutdown_grace + SHUTDOWN_MARGIN)
    # Stop accepting, drain (on_shutdown, run here on the main loop), close the connections.
    await bounded(edge.stop(), deadline.left(reserve=3.0), "draining")
    await bounded(service.mcp.stop(), min(2.0, deadline.left(reserve=2.0)), "stopping MCP servers")
    await bounded(service.adapter.close(), min(1.0, deadline.left(reserve=1.5)), "closing the Slack session")
    await bounded(service.store.close(), deadline.left(reserve=0.5), "closing the store")
    log.info("stopped after %.1fs", time.monotonic() - started)
