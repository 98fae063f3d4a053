"""A server in a child process on a free loopback port (``python -m app serve`` by default).

Used by the crash, restart and signal tests and by every benchmark (ours and the Bolt
baseline): started and waited for on ``/healthz``, stopped with SIGTERM then SIGKILL.
Output goes to a log file, never a pipe: a full pipe would stall the server. Under pytest
(``tests/conftest.py`` sets :attr:`ServerProcess.preloaded`) ``python -m app serve`` children are
forked from a process that imported the app already (``tests/support/preloaded.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar

import aiohttp
import psutil

from .harness import SIGNING_SECRET, free_port
from .preloaded import PreloadedProcess

if TYPE_CHECKING:
    from threadbound_emulator import FakeSlack

    from .fake_model import FakeOpenAI

LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
#: Starts on a new port when the child found its port taken (``free_port`` makes that rare).
PORT_ATTEMPTS = 3
#: ``python -m app serve``: the default child.
_SERVE = (sys.executable, "-m", "app", "serve")
#: What a child that could not listen says (the app's ``listen_error``, Python's EADDRINUSE).
_PORT_IN_USE = "already in use"


def server_env(slack: FakeSlack, llm: FakeOpenAI, **extra: str) -> dict[str, str]:
    """The environment of a served app on ``slack`` and ``llm``: a long lease, no sweep, no progress
    notes or streaming, a short in-flight window (the crash and failover tests' base), with ``extra``
    on top."""
    return {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "x",
        "LEASE_TTL": "600",
        "SWEEP_INTERVAL": "3600",
        "PROGRESS": "off",
        "STREAM": "off",
        # A write whose answer was lost counts as maybe applied this long (the default 35 s would
        # make every takeover of a crash test wait it out; the fault schedule sets the default).
        "WRITE_IN_FLIGHT": "2",
        **extra,
    }


class _PortTaken(Exception):
    """The child exited because another process listens on its port."""


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` (or a process it started) listens on TCP ``port``."""
    try:
        parent = psutil.Process(pid)
        family = [parent, *parent.children(recursive=True)]
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            for process in family
            for c in process.net_connections(kind="tcp")
        )
    except psutil.Error:
        return False


class ServerProcess:
    """One child server; ``async with`` starts and stops it, or call ``start`` / ``stop``."""

    #: Fork ``python -m app serve`` children from a preloaded process (module doc); off for benchmarks.
    preloaded: ClassVar[bool] = False
    #: The argv of each forked start, which the tests' marker check (``tests/conftest.py``) cannot
    #: see through ``subprocess.Popen`` as it sees a spawned one.
    started: ClassVar[list[str]] = []

    def __init__(
        self,
        env: dict[str, str],
        *,
        cwd: Path,
        log_path: Path,
        argv: Sequence[str] | None = None,
        name: str = "threadbound",
        start_timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.argv = list(argv) if argv is not None else [*_SERVE]
        self.env = {**os.environ, **env, "PORT": str(self.port), "HOST": LOOPBACK}
        self.env.setdefault("SLACK_SIGNING_SECRET", SIGNING_SECRET)
        # Children run in temp directories: make this checkout importable there.
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        self.cwd = cwd
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: asyncio.subprocess.Process | PreloadedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> ServerProcess:
        """Start the child and return once it answers ``/healthz`` with 200 on its own port (else
        raise with the log's tail). A port taken by someone else meanwhile (the child says the port
        is in use) is replaced by another and the child started again, up to ``PORT_ATTEMPTS``."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return await self._start_once()
            except _PortTaken:
                if attempt == PORT_ATTEMPTS:
                    raise RuntimeError(f"{self.name}: port after port was in use: {self.tail()}") from None
                self.port = free_port()
                self.env["PORT"] = str(self.port)
        raise AssertionError("unreachable")

    async def _start_once(self) -> ServerProcess:
        try:
            logged = self.log_path.stat().st_size
        except OSError:
            logged = 0
        if self.preloaded and tuple(self.argv[: len(_SERVE)]) == _SERVE:  # serve, maybe with options
            ServerProcess.started.append(" ".join(self.argv))
            self.proc = PreloadedProcess.start(
                self.argv[len(_SERVE) - 1 :], self.env, self.cwd, self.log_path
            )
        else:
            with self.log_path.open("ab") as out:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    env=self.env,
                    cwd=self.cwd,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.returncode is not None:
                    if _PORT_IN_USE in self._logged_since(logged).lower():
                        raise _PortTaken
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/healthz") as response:
                        # Only our child's answer counts: another server that took the port first
                        # answers too (and ours then exits, the port in use).
                        if response.status == 200 and _listens(self.proc.pid, self.port):
                            return self
                if loop.time() > deadline:
                    await self.stop()
                    raise TimeoutError(f"{self.name} did not answer /healthz: {self.tail()}")
                await asyncio.sleep(0.05)

    def _logged_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    async def __aenter__(self) -> ServerProcess:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, within: float = 30.0) -> int:
        """The exit code, once the child has exited (``TimeoutError`` after ``within`` seconds)."""
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), within)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``stop_timeout``."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.stop_timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    def tail(self, lines: int = 15) -> str:
        """The last lines of the log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
