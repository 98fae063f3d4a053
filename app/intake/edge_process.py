"""The service's side of the HTTP edge's own process (``app.intake.edge_child``).

:meth:`EdgeProcess.fork` runs before the service is built (``python -m app serve``, after the
heavy imports and before any thread starts): it binds ``HOST:PORT`` (so a taken port fails the
start at once) and forks. The child inherits the imported modules and the bound sockets and waits.
:meth:`EdgeProcess.start`, once the service is built, serves the service's own web app on a Unix
socket (its start-up hooks run here: the first look at leftover work), tells the child who the bot
is and where that socket is, and returns when the child listens. From then on it turns the child's
lines into calls on this loop: wake-ups to the scheduler, notes, metrics, the ack gate.

Either death ends both. The kernel kills the child when this process dies; when the child dies
unasked, this process ends the same way at once (SIGKILL for a kill, its exit code otherwise), as
if the one process it replaced had died there: what was claimed is in the store, and the next start
(or a peer) takes it over. A child that exits 0 unasked (SIGTERM sent to it alone) stops the
service gracefully. :meth:`stop` stops the child (it answers what is in flight), then runs the
service's shutdown hooks (the drain) and closes its web app.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from app import traces
from app.runs.ack_gate import AckGate
from app.settings import Settings

from .edge_wire import line
from .heartbeat import Heartbeat
from .http import listen_error
from .ingress import IngressResult
from .router import Decision

log = logging.getLogger(__name__)


#: Seconds a stopping service keeps reading what its edge said before it exited.
WIRE_WAIT = 1.0


class EdgeFailed(Exception):
    """The edge's process could not start; the message says why."""


@dataclass(eq=False)
class Wiring:
    """What the child's lines reach in the service."""

    notify: Callable[[str, str | None, tuple[str, str] | None], None]
    delivered: Callable[[IngressResult, dict[str, Any]], None] | None
    external: Callable[[Decision], None] | None
    ack_gate: AckGate | None
    #: A new conversation's status set by the edge: ``(task, "setting" | "ok" | "failed")``, and
    #: ``("", "gone")`` once the edge said its last.
    status: Callable[[str, str], None] | None = None
    #: Each Slack call the edge made: ``(method, outcome, seconds)`` (the metrics).
    slack_call: Callable[[str, str, float], None] | None = None


@dataclass(eq=False)
class EdgeProcess:
    pid: int
    wire: socket.socket
    #: The service loop's, shared with the child, whose ``/healthz`` reads it (``app.intake.heartbeat``).
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _dir: str = field(default="", init=False)
    _writer: asyncio.StreamWriter | None = field(default=None, init=False)
    _reading: asyncio.Task[None] | None = field(default=None, init=False)
    _exited: asyncio.Future[int] | None = field(default=None, init=False)
    _stopping: bool = field(default=False, init=False)
    _busy: bool = field(default=False, init=False)

    @classmethod
    def fork(cls, settings: Settings) -> EdgeProcess:
        """Bind ``HOST:PORT`` and fork the edge's process; OSError when the address cannot be bound."""
        sockets = bind(settings.host, settings.port)
        ours, theirs = socket.socketpair()
        heartbeat = Heartbeat()  # before the fork: its memory is shared with the child
        parent = os.getpid()
        # What is imported by now is shared with the child until written to; frozen, no collection
        # in either process walks it (a walk would copy every page it touches into both).
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                ours.close()
                from .edge_child import run

                code = run(settings, sockets, theirs, parent, heartbeat)
            finally:
                traces.flush()  # the deliveries' spans still queued for export
                logging.shutdown()
                os._exit(code)
        theirs.close()
        for sock in sockets:
            sock.close()  # the child's to listen on
        return cls(pid, ours, heartbeat)

    async def start(
        self, app: web.Application, wiring: Wiring, hello: dict[str, Any], on_exit: Callable[[], None]
    ) -> None:
        """Serve ``app`` (its start-up hooks run) to the child, tell it ``hello``, wait until it listens.
        ``on_exit`` is called when the child exits 0 unasked (the service should stop)."""
        loop = asyncio.get_running_loop()
        self._exited = loop.create_future()
        self.heartbeat.start()  # on the service loop, before the child serves /healthz
        threading.Thread(target=self._wait, args=(loop,), name="threadbound-edge-waiter", daemon=True).start()
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        self._dir = tempfile.mkdtemp(prefix="threadbound-")
        path = str(Path(self._dir) / "service.sock")
        await web.UnixSite(self._runner, path).start()
        reader, self._writer = await asyncio.open_connection(sock=self.wire)
        self._writer.write(line(**hello, forward=path))
        first = asyncio.ensure_future(reader.readline())
        await asyncio.wait((first, self._exited), return_when=asyncio.FIRST_COMPLETED)
        said = json.loads(first.result()) if first.done() and first.result() else {}
        if said.get("t") != "ready":
            first.cancel()
            raise EdgeFailed(said.get("why") or "the HTTP edge process ended while starting")
        self._exited.add_done_callback(lambda done: self._gone(done.result(), on_exit))
        self._reading = asyncio.create_task(self._read(reader, wiring), name="edge-wire")

    async def _read(self, reader: asyncio.StreamReader, wiring: Wiring) -> None:
        try:
            while said := await reader.readline():
                try:
                    self._heard(json.loads(said), wiring)
                except Exception:  # one bad line is logged; the rest are still heard
                    log.exception("could not act on the HTTP edge's %r", said[:200])
        finally:
            if wiring.status is not None:
                wiring.status("", "gone")  # no status outcome will come: runs waiting for one go on

    def _heard(self, said: dict[str, Any], wiring: Wiring) -> None:
        kind = said.get("t")
        if kind == "wake":
            if said.get("spans"):
                traces.DELIVERIES.remember_portable(said["task"], said["spans"])
            wiring.notify(said["task"], said.get("author"), _message(said.get("message")))
        elif kind == "delivered" and wiring.delivered is not None:
            wiring.delivered(IngressResult(said["status"], said["outcome"]), {})
        elif kind == "external" and wiring.external is not None:
            wiring.external(Decision(**said["decision"]))
        elif kind == "status" and wiring.status is not None:
            wiring.status(said["task"], said["state"])
        elif kind == "slack_call" and wiring.slack_call is not None:
            wiring.slack_call(said["method"], said["outcome"], float(said["seconds"]))
        elif kind == "busy" and wiring.ack_gate is not None and not self._busy:
            self._busy = True
            wiring.ack_gate.enter()
        elif kind == "quiet" and wiring.ack_gate is not None and self._busy:
            self._busy = False
            wiring.ack_gate.leave()

    def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a thread of its own: the child's exit status, handed to the loop."""
        try:
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by someone else's wait(): gone, how is unknown
            code = 1
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            loop.call_soon_threadsafe(self._set_exited, code)

    def _set_exited(self, code: int) -> None:
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(code)

    def _gone(self, code: int, on_exit: Callable[[], None]) -> None:
        if self._stopping:
            return
        if code == 0 or code == -signal.SIGTERM:
            log.warning("the HTTP edge process stopped; stopping the service")
            on_exit()
            return
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        log.error("the HTTP edge process died (%s); ending this process as well", how)
        logging.shutdown()
        if code < 0:
            os.kill(os.getpid(), signal.SIGKILL)  # ignored when this is PID 1 of a container: then
        os._exit(128 - code if code < 0 else code)  # the shell's code for death by that signal

    async def stop(self) -> None:
        """Stop the child (it answers the requests in flight), then drain and close the service's app.
        Cancelled (a bounded shutdown step overran), the child is killed."""
        self._stopping = True
        await self.heartbeat.stop()  # the child stops serving /healthz below, and for good
        exited = self._exited
        try:
            if exited is not None and not exited.done():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGTERM)
                await asyncio.shield(exited)
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._close_wire()
            raise
        if self._reading is not None:
            # What the child said before it exited (the last claims' wake-ups) is heard, up to its
            # end of file, so those runs start before the drain, as they did in one process.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reading), WIRE_WAIT)
        self._close_wire()
        if self._runner is not None:
            await self._runner.cleanup()  # the shutdown hooks (the drain), then the open connections
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _close_wire(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        if self._writer is not None:
            self._writer.close()

    def kill(self) -> None:
        """End the child now (the service failed to start)."""
        self._stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


def bind(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address of ``host`` (as asyncio's ``create_server`` binds them), not
    yet listening: connections are refused until the edge listens."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    families = {info[0] for info in infos}
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys((i[0], i[1], i[2], i[3], i[4]) for i in infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and len(families) > 1 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def fork_edge(settings: Settings) -> EdgeProcess | None:
    """The HTTP edge's own process (``EDGE_PROCESS``), bound to HOST:PORT; None to serve it from a
    thread (turned off, Socket Mode only, a database only this process can see, or a platform
    without ``fork``). EdgeFailed names a bind that failed (a port in use, say)."""
    if (
        not settings.edge_process
        or not settings.http_events
        or _private_database(settings.resolved_database_url)
        or not hasattr(os, "fork")
        or sys.platform == "win32"
    ):
        return None
    try:
        return EdgeProcess.fork(settings)
    except OSError as exc:
        raise EdgeFailed(listen_error(settings.host, settings.port, exc)) from exc


def _private_database(url: str) -> bool:
    """An in-memory SQLite database: another process would claim into a database of its own."""
    return url.lower().startswith("sqlite") and ":memory:" in url


def hello(bot: Any, shutdown_timeout: float, status: Sequence[str] | None = None) -> dict[str, Any]:
    """The service's one line to its edge: who the bot is, how long a stop may take, and (when its
    runs show a thinking status) the loading messages the edge sets with a new conversation's."""
    said: dict[str, Any] = {"bot": asdict(bot), "shutdown_timeout": shutdown_timeout}
    if status is not None:
        said["status"] = {"loading": list(status)}
    return said


def _message(said: Any) -> tuple[str, str] | None:
    """A wake-up's ``(channel, ts)``; None for anything else (the run then mints the handle itself)."""
    if isinstance(said, list) and len(said) == 2 and all(isinstance(part, str) and part for part in said):
        return said[0], said[1]
    return None
