"""The HTTP edge on a thread and event loop of its own, so an acknowledgement never waits behind run work.

Under ``serve`` with ``EDGE_PROCESS=false`` (by default the edge has a process of its own,
``app.intake.edge_process``) the aiohttp app of :class:`~app.intake.http.HttpEdge` runs here, not
on the main loop that runs the agent (pydantic-ai's steps, the model client, prompt building,
Slack writes).
A delivery's whole ack path stays on this loop: the signature check, the parse, the router, the
durable claim and inbox append (through a store of its own, ``Store.for_another_loop``: on
SQLite the same database thread, on Postgres a small pool of its own) and the 200. What it hands
on crosses to the main loop with ``call_soon_threadsafe`` (:class:`MainLoop`): the scheduler's
wake-up, the external-user note. What needs the main loop's objects is awaited there: Bolt
(``url_verification``, clicks, other payloads), the agent view's events, ``/readyz``'s ping,
start-up and the drain on shutdown. Both loops share one GIL: a ready ack waits for the
interpreter's switch interval, not for every run callback queued before it. The edge's thread
gives the GIL up at every socket read and write and must then win it back from a main loop busy
with runs, each time waiting up to one interval: :meth:`EdgeThread.start` shortens it from
Python's 5 ms to :data:`SWITCH_INTERVAL` (docs/performance.md: the ingress rows with each).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from storage.base import Store

from .agent_view import AgentView
from .heartbeat import Heartbeat
from .http import HttpEdge, event_acker
from .ingress import Ingress

log = logging.getLogger(__name__)
T = TypeVar("T")
#: The interpreter's switch interval once an edge thread serves (seconds; Python's default 0.005).
SWITCH_INTERVAL = 0.0005


class MainLoop:
    """Calls into the loop a :class:`MainLoop` was made on (the service's), from any thread; on
    that loop itself they are plain calls."""

    def __init__(self) -> None:
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None  # made outside a loop: every call is a plain call
        #: Calls handed over by :meth:`soon` and not yet run; one crossing runs all of them.
        self._pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._lock = threading.Lock()

    def here(self) -> bool:
        """Whether the caller runs on the main loop (or there is no other)."""
        if self.loop is None:
            return True
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    async def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """``await make()`` on the main loop; cancelling the caller cancels it there."""
        if self.here():
            return await make()
        assert self.loop is not None

        async def run() -> T:
            return await make()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self.loop))

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the main loop, without waiting for it, in the order handed over.

        Calls handed over while earlier ones still wait cross together: only the first wakes the
        main loop (``call_soon_threadsafe`` writes to its self-pipe, a system call that lets go of
        the GIL, after which the edge's thread waits to get it back), so a burst of deliveries
        costs the edge one crossing per main-loop lap, not one per delivery."""
        if self.here():
            fn(*args)
            return
        assert self.loop is not None
        with self._lock:
            self._pending.append((fn, args))
            if len(self._pending) > 1:
                return  # a crossing is on its way and will run this one too
        with contextlib.suppress(RuntimeError):  # the main loop is closed: the process is ending
            self.loop.call_soon_threadsafe(self._run_pending)

    def _run_pending(self) -> None:
        with self._lock:
            calls, self._pending = self._pending, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:  # as the loop would for a callback of its own: log it, run the rest
                log.exception("a call handed to the main loop failed")


@dataclass(eq=False)
class EdgeThread:
    """Serves ``edge.app`` on ``host:port`` from a daemon thread with its own event loop.

    :meth:`start` returns once it listens (or raises the ``OSError`` of listening); the app's
    start-up hooks have run by then. :meth:`stop` stops accepting, runs the app's shutdown hooks
    (the drain, on the main loop) and closes the connections, then ends the thread."""

    #: The service's: the edge claims through copies of ``ingress`` and ``store`` made for its loop.
    edge: HttpEdge
    ingress: Ingress
    store: Store
    agent_view: AgentView | None
    main: MainLoop
    #: Seconds without a beat of the main loop past which ``/healthz`` answers 503 (0: never).
    health_deadline: float = 0.0
    #: The port it listens on, once it does (``start`` with port 0 picks a free one).
    port: int = field(default=0, init=False)
    _where: tuple[str, int, float] = field(default=("", 0, 0.0), init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _stop: asyncio.Event | None = field(default=None, init=False)
    _listening: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future, init=False)
    _stopped: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future, init=False)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._main_of_thread, name="threadbound-http", daemon=True)
        #: The main loop's, read by ``/healthz`` on the edge's thread.
        self.heartbeat = Heartbeat()

    async def start(self, host: str, port: int, shutdown_timeout: float) -> None:
        """Listen on ``host:port``; ``shutdown_timeout``: how long :meth:`stop` lets requests in
        flight finish once the drain is over."""
        self._where = (host, port, shutdown_timeout)
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))  # module doc
        self.heartbeat.start()  # on the main loop: a wedged main loop stops beating
        self.edge.watch(self.heartbeat, self.health_deadline)
        self._thread.start()
        try:
            await asyncio.wrap_future(self._listening)
        except BaseException:
            await self.heartbeat.stop()
            raise

    async def stop(self) -> None:
        """Stop serving; cancelled (a bounded shutdown step overran), it cancels what the edge's
        loop is doing, the drain on the main loop included, as cancelling the runner's clean-up did."""
        loop, stop, task = self._loop, self._stop, self._task
        if loop is None or stop is None or task is None or self._stopped.done():
            await self.heartbeat.stop()
            return
        with contextlib.suppress(RuntimeError):  # the thread ended already
            loop.call_soon_threadsafe(stop.set)
        try:
            await asyncio.shield(asyncio.wrap_future(self._stopped))
        except asyncio.CancelledError:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
            raise
        finally:
            await self.heartbeat.stop()

    def _main_of_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._task = loop.create_task(self._serve(), name="http-edge")
            loop.run_until_complete(self._task)
        except BaseException as exc:
            for future in (self._listening, self._stopped):
                if not future.done():
                    future.set_exception(exc)
        finally:
            for future in (self._listening, self._stopped):
                if not future.done():
                    future.set_result(None)
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        store = self.store.for_another_loop()
        store.inline_when(self.edge.nothing_else_to_do)
        # The claims of HTTP deliveries run here; their wake-ups and notes cross to the main loop.
        ingress = self.ingress.on_loop(store, self.main.soon)
        previous = self.edge.events
        self.edge.events = event_acker(ingress, self.agent_view, self.main)
        host, port, shutdown_timeout = self._where
        runner = web.AppRunner(
            self.edge.app, handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout
        )
        try:
            await runner.setup()  # the app's start-up hooks (they run on the main loop)
            site = web.TCPSite(runner, host=host, port=port)
            try:
                await site.start()
            except OSError as exc:
                self._listening.set_exception(exc)
                return
            self.port = int(runner.addresses[0][1])
            self._listening.set_result(None)
            await self._stop.wait()
            await site.stop()  # stop accepting first
        finally:
            try:
                await runner.cleanup()  # the shutdown hooks (the drain), then the open connections
            finally:
                self.edge.events = previous
                await store.close()
