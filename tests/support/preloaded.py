"""``python -m app serve`` children forked from a process that has imported the app already.

A served app spends about 1.3 s of CPU importing pydantic-ai, the OpenAI SDK, Bolt and aiohttp
before it runs a line of its own; the crash, restart and failover tests start hundreds of them, and
on 2 cores that import was a third of the suite's time. Here a ``multiprocessing`` fork server (one
per test worker, started on first use) imports those modules once, and each child is forked from it:
a real process with its own pid, environment, working directory and log, killed by real signals,
that runs ``app/__main__.py`` as ``python -m app`` does (``runpy``). What it skips is only the
import; ``storage.crashpoints`` is re-armed from the child's own environment, as an import would.

Benchmarks never use it (a start's cost is part of what ``recovery_seconds`` measures), nor do
children with an ``argv`` of their own (``tests/test_lazy_imports.py`` counts what a fresh process
imports). ``THREADBOUND_TEST_SPAWN=1`` turns it off for a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.context
import os
import runpy
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

#: What a served app imports before its own code runs (not ``app.__main__`` itself: runpy runs that
#: module fresh as ``__main__`` and warns when it was imported already).
PRELOAD = ["app.logs", "app.settings", "app.service", "pydantic_ai.models.openai", "storage.sqlite"]

_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _serve(args: Sequence[str], env: dict[str, str], cwd: str, log_path: str) -> None:
    """In the forked child: become ``python -m app <args>`` with ``env`` in ``cwd``, output to the log."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    from storage import crashpoints

    crashpoints.arm_from_environment()
    sys.argv = ["app", *args]
    try:
        runpy.run_module("app", run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class PreloadedProcess:
    """A forked child with the parts of ``asyncio.subprocess.Process`` that ``ServerProcess`` uses."""

    def __init__(self, process: multiprocessing.context.ForkServerProcess) -> None:
        self._process = process
        self.pid: int = process.pid or 0
        #: Settled when the sentinel turns readable (the child exited); shared by every waiter.
        self._exited: asyncio.Future[None] | None = None

    @classmethod
    def start(cls, args: Sequence[str], env: dict[str, str], cwd: Path, log_path: Path) -> PreloadedProcess:
        process = _forkserver().Process(
            target=_serve, args=(list(args), env, str(cwd), str(log_path)), name="threadbound", daemon=True
        )
        process.start()
        return cls(process)

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal that ended it), or None while it runs."""
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile: its code is on its way
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    async def wait(self) -> int:
        """The exit code, once the child has exited (its sentinel turns readable). Waiters at once
        share one reader of the sentinel (a second ``add_reader`` would replace the first's)."""
        loop = asyncio.get_running_loop()
        while (code := self.returncode) is None:
            exited = self._exited
            if exited is None or exited.done() or exited.get_loop() is not loop:
                exited = self._exited = loop.create_future()
                loop.add_reader(self._process.sentinel, _readable, loop, self._process.sentinel, exited)
            await asyncio.shield(exited)
        return code


def _readable(loop: asyncio.AbstractEventLoop, sentinel: int, exited: asyncio.Future[None]) -> None:
    loop.remove_reader(sentinel)
    if not exited.done():
        exited.set_result(None)
