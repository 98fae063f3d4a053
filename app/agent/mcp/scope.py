"""Whose call it is: what an MCP server sends while a call is in flight reaches that call's run.

A server may speak to the client in the middle of a call — progress, a sampling request, a log
line. Progress carries the call's token, so it always finds its call. A request the server sends
on its own (sampling over a session) carries nothing of the call it serves, and one server session
is shared by every run:
:class:`InFlight` keeps the calls in flight on one session and answers :meth:`InFlight.owner` only
when it can be told — one call in flight, or several of the same run. Otherwise the request is
refused (the server reads an error), never answered for the wrong person.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from channel.contract import Step

if TYPE_CHECKING:
    from app.agent.usage import UsageMeter
    from channel.session import ChannelSession

log = logging.getLogger(__name__)

#: Seconds between two visible updates of one call's progress (each is a Slack write).
PROGRESS_EVERY_S = 2.0

#: Shows a line of progress where the run shows its status (``Progress.tool_progress``).
ShowProgress = Callable[["ChannelSession", str], Awaitable[None]]


@dataclass(eq=False, slots=True)
class CallScope:
    """One call in flight: its run's session, the tool and the step that shows it."""

    session: ChannelSession
    #: The tool as the model knows it (``server_tool``) and as people read it.
    tool: str
    label: str
    #: The model's id of the call: the streamed answer's step for it has this id.
    call_id: str
    #: The run's usage meter, so what a server samples is counted for the run's person.
    usage: UsageMeter | None = None
    #: Where the status shows progress when the answer is not streamed.
    show: ShowProgress | None = None
    clock: Callable[[], float] = time.monotonic
    _shown_at: float = field(default=float("-inf"))

    @property
    def person(self) -> str:
        return self.session.requester

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A ``notifications/progress`` of this call: the call's visible step says how far it is."""
        now = self.clock()
        done = total is not None and total > 0 and progress >= total
        if now - self._shown_at < PROGRESS_EVERY_S and not done:
            return
        self._shown_at = now
        text = progress_text(self.label, progress, total, message)
        try:
            if self.session.streaming:
                self.session.stream_step(Step(self.call_id or self.tool, text, "in_progress"))
            elif self.show is not None:
                await self.show(self.session, text)
        except Exception:  # progress is a courtesy: it never fails the call
            log.debug("MCP progress of %s not shown", self.tool, exc_info=True)


def progress_text(label: str, progress: float, total: float | None, message: str | None) -> str:
    """``tickets: export (3 of 5: writing rows)``; the server's message bounded and on one line."""
    how_far = f"{progress:g} of {total:g}" if total else f"{progress:g}"
    said = " ".join((message or "").split())[:80]
    return f"{label} ({how_far}{': ' + said if said else ''})"


#: The call this task makes: where a request that comes back within the call's own task (the
#: sessionless protocol's input requests) finds its run without guessing.
CURRENT: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar("mcp_call", default=None)


class InFlight:
    """The calls in flight on one server session."""

    def __init__(self) -> None:
        self._scopes: list[CallScope] = []

    @contextlib.contextmanager
    def calling(self, scope: CallScope | None) -> Iterator[None]:
        if scope is None:
            yield
            return
        self._scopes.append(scope)
        token = CURRENT.set(scope)
        try:
            yield
        finally:
            CURRENT.reset(token)
            self._scopes.remove(scope)

    def owner(self) -> CallScope | None:
        """The call a server's request belongs to, when that can be told: the only call in flight,
        or the newest of several that are all one run's; within a call's own task, that call."""
        current = CURRENT.get()
        if current is not None and current in self._scopes:
            return current
        if not self._scopes:
            return None
        sessions = {id(s.session) for s in self._scopes}
        return self._scopes[-1] if len(sessions) == 1 else None

    def __len__(self) -> int:
        return len(self._scopes)


def no_owner(what: str, server: str, count: int) -> Any:
    """The error a server reads when its request cannot be tied to one run's call."""
    import mcp_types

    reason = (
        f"{what} is only answered during a tool call"
        if count == 0
        else f"{what} cannot be answered while {count} calls of different conversations are in flight"
    )
    log.info("MCP server %s: %s", server, reason)
    return mcp_types.ErrorData(code=-32600, message=reason)
