"""A conversation's agent session while its runs work: ``processing``, ``suspended``, ``active``.

Where the adapter offers agent sessions (``ChannelFeatures.sessions``; on Slack, an app declared an
agent) and ``AGENT_SESSIONS`` is not ``off``, a run sets its thread's session to ``processing`` as it
starts — creating it on the task's first run with a short title from the first message and the
person who wrote it (a later run names the stored title, kept in step with a person's rename, should
the session not exist yet) — so people see a status and a Stop button (``app.runs.stop``); when the run ends
the session is ``suspended`` if the task now waits on a person (an ask, an approval), else ``active``.
A stopped run ends ``active`` too; a run that lost its lease leaves the session to the new owner.

Like progress (``app.runs.progress``) this is a runtime effect around the run: it never delays the
first model request (the start is set in the background), a failure is logged and never fails a run,
and an adapter that refuses sessions (``unsupported``: Slack said the app is no agent) is not asked
again. ``AGENT_SESSIONS=on`` asks even where the adapter's scopes do not show the feature.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal
from weakref import WeakKeyDictionary

from channel import inbound
from channel.contract import ChannelAdapter, Origin, SessionStatus
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import InboxItem, Store

from .outcome import RunHooks

log = logging.getLogger(__name__)

Mode = Literal["auto", "on", "off"]
#: Characters of the first message a new session's title keeps.
TITLE_CHARS = 60
#: Seconds the run's end waits for its session's start, and for its own change.
SETTLE_S = 5.0


def title_of(text: str) -> str:
    """A short title from a message: its first line, at most :data:`TITLE_CHARS` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class SessionStatuses:
    """The run hooks that keep a conversation's agent session in step with its runs (module doc)."""

    def __init__(self, store: Store, mode: Mode = "auto", clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.mode = mode
        self.clock = clock
        self._starting: WeakKeyDictionary[ChannelSession, asyncio.Task[bool]] = WeakKeyDictionary()
        self._off = False  # the adapter refused sessions: not asked again

    def wanted(self, adapter: ChannelAdapter, origin: Origin) -> bool:
        if self.mode == "off" or self._off or not origin.thread:
            return False
        return self.mode == "on" or adapter.features.sessions

    def hooks(self) -> RunHooks:
        if self.mode == "off":
            return RunHooks()
        return RunHooks(on_start=self.on_start, on_end=self.on_end)

    async def on_start(self, session: ChannelSession, items: Sequence[InboxItem]) -> None:
        if self.wanted(session.adapter, session.origin):
            self._starting[session] = asyncio.create_task(self._begin(session, items), name="agent-session")

    async def _begin(self, session: ChannelSession, items: Sequence[InboxItem]) -> bool:
        task, title = session.task, ""
        if task.transcript:  # a later run: the stored title (a person's rename kept), should it create one
            with contextlib.suppress(Exception):
                title = await self.store.session_title(task.task_id)
        else:  # the task's first run creates the session: its title, its initiator
            first = inbound.stored(items[0].payload) if items else None
            if first is not None:
                with contextlib.suppress(Exception):  # the text as the model reads it: names, no ids
                    title = title_of(str((await session.inbound_row(first.data)).get("text") or ""))
            if title:
                with contextlib.suppress(Exception):
                    await self.store.set_session_title(task.task_id, title, now=self.clock())
        return await self._set(session, "processing", title=title, initiator=session.requester)

    async def on_end(self, session: ChannelSession, items: Sequence[InboxItem], status: str) -> None:
        starting = self._starting.pop(session, None)
        if starting is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_S):
                await asyncio.shield(starting)
        if not starting.done() or not starting.result() or status == "stopped":
            return  # not shown, or the conversation's new owner has it now
        final: SessionStatus = "suspended" if await self._waits_on_a_person(session) else "active"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_S):
                await self._set(session, final)

    async def _waits_on_a_person(self, session: ChannelSession) -> bool:
        if session.turn_end == "waiting":  # it asked (channel_ask)
            return True
        try:
            return await self.store.has_open_approval(session.task.task_id)
        except Exception:
            log.debug("agent session: could not look for an open approval", exc_info=True)
            return False

    async def _set(
        self, session: ChannelSession, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> bool:
        try:
            await session.adapter.set_session(session.origin, status, title=title, initiator=initiator)
        except ChannelError as exc:
            if exc.code == "unsupported":
                self._off = True
            log.info("agent session not set to %s (%s)", status, exc.provider_code or exc.code)
            return False
        except Exception:
            log.warning("agent session failed unexpectedly", exc_info=True)
            return False
        return True
