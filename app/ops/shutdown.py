"""A shutdown that ends in time whatever stalls: ``SHUTDOWN_GRACE``, then at most ``SHUTDOWN_MARGIN``.

PaaS platforms send SIGTERM and kill the process a fixed time later (Heroku 30 s, Render 30 s by
default, Fly 5 s by default: see docs/deploy.md). On SIGTERM the server stops taking work and lets
running turns finish for ``SHUTDOWN_GRACE``; what comes after — cancelled runs cleaning up, card
updates, closing MCP servers, the Slack session and the store — gets ``SHUTDOWN_MARGIN`` seconds in
all, each step its share (:func:`bounded`). Should something still hang (Slack answering nothing,
Postgres unreachable, a blocked thread), :class:`Watchdog` ends the process just before the margin
is spent. Nothing is lost that way: every acknowledged message, transcript, lease and open effect is
in the store, and the next start (or another instance) resumes what was running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable

log = logging.getLogger(__name__)

#: Seconds the whole shutdown may take beyond ``SHUTDOWN_GRACE``.
SHUTDOWN_MARGIN = 10.0
#: Seconds runs cancelled at the end of the grace get to clean up (their progress line, say).
CANCEL_WAIT = 3.0
#: Seconds the HTTP server waits for requests in flight once running turns are done.
HTTP_WAIT = 2.0
#: The watchdog fires this long before the margin is spent (the process takes a moment to exit).
_EXIT_EARLY = 0.5


class Watchdog:
    """Ends the process (exit status 0) ``seconds`` after :meth:`start` unless cancelled; a thread,
    so it fires even when the event loop is blocked, and a daemon, so a process that ends first is
    not held by it. ``serve`` never cancels its own: the event loop's teardown after the shutdown
    steps may hang as well (a store pool's tasks on connections that answer nothing)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds - _EXIT_EARLY)
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        log.error("shutdown did not finish in time; exiting now (the next start resumes what was running)")
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:
                pass
        sys.stderr.flush()
        os._exit(0)


class Deadline:
    """The end of the shutdown's margin, for sharing it between steps."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self, reserve: float = 0.0) -> float:
        return max(0.0, self.at - time.monotonic() - reserve)


async def bounded(step: Awaitable[object], seconds: float, what: str) -> None:
    """Await ``step`` for at most ``seconds`` (then cancel it and go on), logging what overran."""
    try:
        await asyncio.wait_for(step, max(seconds, 0.0))
    except TimeoutError:
        log.warning("shutdown: %s did not finish within %.1f s; going on without it", what, seconds)
    except Exception:
        log.exception("shutdown: %s failed", what)
