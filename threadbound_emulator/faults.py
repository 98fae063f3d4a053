"""Scripted faults for a fake HTTP server: error answers, dropped connections, delays, holds.

Shared by the Slack emulator and the fake model server (``tests.support.fake_model``).
Faults queue per key (a Web API method, an endpoint) and are consumed in order,
each for ``times`` requests (``None``: every request from then on):

- ``fail``: answer an error (e.g. 429 with ``Retry-After``, or a 5xx) and do nothing; with
  ``applied``, do the work first (Slack's ambiguous 5xx, ``internal_error``, ``request_timeout``:
  the client cannot tell whether it happened); with ``html``, the answer is an HTML page
  (a proxy's 502/504) instead of Slack's JSON;
- ``drop``: do the work, then close the connection without an answer, so the
  client cannot tell whether it happened;
- ``delay``: wait ``seconds`` before handling the request;
- ``late``: close the connection at once without an answer, and do the work ``seconds`` later
  (a write Slack applies after the caller gave up on it: a look-up right after the cut finds
  nothing, one after ``seconds`` finds it).

A :class:`RateLimit` is not consumed either: it answers 429 with ``Retry-After`` to the
requests of a key beyond a rate per scope (Slack's one post per second per channel).

A *hold* is not consumed: from ``hold(key)`` until ``release(key)`` every request
is handled and its answer kept back, and ``held(key)`` is set once one is waiting.
Each server decides what an error answer looks like; this module only keeps the script.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from aiohttp import web


@dataclass
class Fault:
    """One scripted fault; see the module docstring."""

    kind: Literal["fail", "drop", "delay", "late"]
    times: int | None = 1
    status: int = 200
    #: The error code or message the server puts in its error answer.
    error: str = ""
    #: Seconds for a ``Retry-After`` header (``fail`` only).
    retry_after: int | None = None
    #: Seconds to wait (``delay``), or before the work is done (``late``).
    seconds: float = 0.0
    #: ``fail`` only: the work is done before the error is answered.
    applied: bool = False
    #: ``fail`` only: the answer is an HTML page, not JSON.
    html: bool = False

    def headers(self) -> dict[str, str]:
        """The headers of a ``fail`` answer."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


@dataclass
class _Hold:
    began: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)


class Faults:
    """The fault script of one server, per key; see the module docstring."""

    def __init__(self) -> None:
        self._queues: dict[str, list[Fault]] = {}
        self._holds: dict[str, _Hold] = {}

    def add(self, key: str, fault: Fault) -> None:
        """Queue ``fault`` for ``key``, after the faults already queued."""
        self._queues.setdefault(key, []).append(fault)

    def clear(self, key: str | None = None) -> None:
        """Forget queued faults (of one key, or all). Holds are not affected."""
        if key is None:
            self._queues.clear()
        else:
            self._queues.pop(key, None)

    def next(self, key: str) -> Fault | None:
        """The fault for this request of ``key``, counting it against its ``times``."""
        queue = self._queues.get(key)
        if not queue:
            return None
        fault = queue[0]
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
        return fault

    def hold(self, key: str) -> asyncio.Event:
        """Keep answers of ``key`` back until ``release(key)``; returns ``held(key)``."""
        return self._holds.setdefault(key, _Hold()).began

    def held(self, key: str) -> asyncio.Event:
        """The event set once a request of ``key`` is being held (``hold`` must be active)."""
        hold = self._holds.get(key)
        if hold is None:
            raise RuntimeError(f"{key} is not held: call hold({key!r}) first")
        return hold.began

    def release(self, key: str) -> None:
        """Let every held request of ``key`` answer, and stop holding new ones."""
        hold = self._holds.pop(key, None)
        if hold is not None:
            hold.gate.set()

    def release_all(self) -> None:
        for hold in self._holds.values():
            hold.gate.set()
        self._holds.clear()

    async def wait_if_held(self, key: str) -> None:
        """Block while ``key`` is held (call it after the work, before answering)."""
        hold = self._holds.get(key)
        if hold is not None:
            hold.began.set()
            await hold.gate.wait()


class RateLimit:
    """At most ``per_second`` requests per scope (e.g. per channel) after a burst of ``burst``,
    as a leaky bucket (GCRA); a request beyond it is refused with the whole seconds to wait."""

    def __init__(
        self, per_second: float, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = 1.0 / per_second
        self.tolerance = (burst - 1) * self.interval
        self._clock = clock
        self._due: dict[str, float] = {}
        #: Requests refused, per scope.
        self.refused: dict[str, int] = {}

    def admit(self, scope: str) -> int | None:
        """None when a request in ``scope`` may go now (it is counted); else the ``Retry-After``
        seconds (whole, at least 1, as Slack sends them)."""
        now = self._clock()
        due = max(self._due.get(scope, now), now)
        if due - now > self.tolerance:
            self.refused[scope] = self.refused.get(scope, 0) + 1
            return max(1, math.ceil(due - self.tolerance - now))
        self._due[scope] = due + self.interval
        return None


async def pause(fault: Fault | None) -> None:
    """Wait out a ``delay`` fault (no-op for any other)."""
    if fault is not None and fault.kind == "delay":
        await asyncio.sleep(fault.seconds)


def drop_connection(request: web.Request) -> NoReturn:
    """Close the connection without an answer (the client sees ``ServerDisconnectedError``)."""
    if request.transport is not None:
        request.transport.abort()
    raise web.HTTPServiceUnavailable()
